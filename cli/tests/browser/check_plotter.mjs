// Loads the snapbus plotter page in headless Chromium and checks, from the page's own state
// (`window.snapbus`), that its plots hold data points and its image view shows a frame; then
// opens a second page, closes it, and checks the first keeps receiving stream messages.
//
// Usage: node check_plotter.mjs URL SCREENSHOT.png
// Prints the final state as one JSON line on stdout; exits 1 (with the state and the page's
// console) when a check fails within the time limit.
import { chromium } from "playwright-core";

const [url, screenshot] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error("usage: node check_plotter.mjs URL SCREENSHOT.png");
  process.exit(2);
}
const executablePath = process.env.SNAPBUS_CHROMIUM || "/usr/bin/chromium";
const LIMIT_MS = 30000;

const browser = await chromium.launch({
  executablePath,
  // As root, in a container, on a machine without outside network.
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const consoleLines = [];
let failed = null;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on("console", (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
  page.on("pageerror", (e) => consoleLines.push(`[pageerror] ${e.message}`));
  await page.goto(url, { waitUntil: "load" });
  const ready = () =>
    page.evaluate(() => {
      const s = window.snapbus;
      return !!s && s.connected && s.points > 0 && s.plotted > 0 && s.frames > 0;
    });
  const until = async (cond, what) => {
    const t0 = Date.now();
    while (!(await cond())) {
      if (Date.now() - t0 > LIMIT_MS) throw new Error(`timed out: ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  await until(ready, "plots with points and an image frame");

  // A second page at the same time, then closed: the first keeps streaming.
  const second = await context.newPage();
  await second.goto(url, { waitUntil: "load" });
  await until(
    () => second.evaluate(() => !!window.snapbus && window.snapbus.messages > 0),
    "the second page receives the stream",
  );
  await second.close();
  const before = await page.evaluate(() => window.snapbus.messages);
  await until(
    () => page.evaluate((n) => window.snapbus.messages > n + 2, before),
    "the first page keeps receiving after the second closed",
  );
  // Let a few more messages draw, then the picture.
  await new Promise((r) => setTimeout(r, 600));
  await page.screenshot({ path: screenshot, fullPage: true });
  const state = await page.evaluate(() => window.snapbus);
  console.log(JSON.stringify(state));
} catch (e) {
  failed = e;
} finally {
  await browser.close();
}
if (failed) {
  console.error(String(failed));
  console.error(consoleLines.join("\n"));
  process.exit(1);
}
