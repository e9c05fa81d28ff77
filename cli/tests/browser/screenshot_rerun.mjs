// Takes the README's screenshot of rerun's web viewer showing the demo (not a test): the
// viewer is served by `rerun --serve-web` (see README.md, "Live view in rerun"), rendered by
// headless Chromium on SwiftShader (WebGL on the CPU).
//
// Usage: node screenshot_rerun.mjs URL OUT.png [SECONDS]
import { chromium } from "playwright-core";

const [url, out, seconds = "40"] = process.argv.slice(2);
if (!url || !out) {
  console.error("usage: node screenshot_rerun.mjs URL OUT.png [SECONDS]");
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.SNAPBUS_CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--ignore-gpu-blocklist",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
  page.on("console", (m) => console.error(`[${m.type()}] ${m.text()}`));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForTimeout(Number(seconds) * 1000);
  await page.screenshot({ path: out });
} finally {
  await browser.close();
}
