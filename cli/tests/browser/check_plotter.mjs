// Loads the snapbus plotter page in headless Chromium and checks, from the page's own state
// (`window.snapbus`), what a researcher sees:
// - the default view: one panel per field (group), each with its own y scale (its y axis
//   covers its own data and not much more) and a y label, summary schemas collapsed in the
//   sidebar and never in a panel, the image labelled with its run (pid, start);
// - "waiting for data…" nowhere once the history is drawn;
// - a second page opened and closed while the first keeps receiving stream messages;
// - two screenshots: when the history is drawn, and later with live data.
//
// Usage: node check_plotter.mjs URL HISTORY.png LIVE.png
//        node check_plotter.mjs --new-run PID URL
//        node check_plotter.mjs --tensors URL
// Prints {"history": state, "live": state} as one JSON line on stdout (the Rust test checks
// the panels against the demo's formulas); exits 1 (with the state and the page's console)
// when a check fails within the time limit. With --new-run (after the experiment was
// restarted as process PID), checks instead that a page opened now shows only that run in its
// panels and images, and lists the previous run as ended. With --tensors, waits until every
// tensor card is drawn and prints per card its title, caption, canvas size, first pixel and
// how many of its pixels are inked (neither white nor transparent).
import { chromium } from "playwright-core";

const newRun = process.argv[2] === "--new-run";
const tensors = process.argv[2] === "--tensors";
const [url, historyShot, liveShot] = newRun
  ? [process.argv[4]]
  : tensors ? [process.argv[3], "-", "-"] : process.argv.slice(2);
const runPid = newRun ? Number(process.argv[3]) : null;
if (!url || (!newRun && (!historyShot || !liveShot)) || (newRun && !(runPid > 0))) {
  console.error("usage: node check_plotter.mjs URL HISTORY.png LIVE.png | --new-run PID URL | --tensors URL");
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
let last = null;

const check = (ok, what) => {
  if (!ok) throw new Error(`check failed: ${what}`);
};

// A field's group as the page forms it (position.0 -> position, observation.mean -> observation).
const baseOf = (f) => {
  const m = /^(.*)\.(mean|min|max)$/.exec(f);
  return m && m[1] ? m[1] : f;
};

// Every panel plots one field group of one schema, and its y axis is its own: it covers the
// panel's data, with at most a 5 % margin each side (plus a little for a flat line).
function checkPanels(state) {
  check(state.panels.length >= 2, `several panels by default (${state.panels.length})`);
  for (const p of state.panels) {
    const what = `panel ${JSON.stringify(p)}`;
    check(p.note === null, `${what}: drawn, no note`);
    check(p.schemas.length === 1 && !/\.summary$/.test(p.schemas[0]), `${what}: one schema, not a summary`);
    check(new Set(p.fields.map(baseOf)).size === 1, `${what}: one field group`);
    check(p.yLabel && p.yLabel.startsWith(baseOf(p.fields[0])), `${what}: a y label naming the field`);
    check(p.columns > 0, `${what}: data drawn`);
    const range = p.dataMax - p.dataMin;
    const slack = range > 0 ? range * 0.051 : Math.abs(p.dataMin) * 0.11 + 1;
    check(p.yMin <= p.dataMin && p.yMax >= p.dataMax, `${what}: the y axis covers its data`);
    check(p.dataMin - p.yMin <= slack && p.yMax - p.dataMax <= slack, `${what}: the y axis is its own data's`);
  }
}

// After a restart: only the new run (process runPid) in the panels and the image view; the
// old one listed, as ended.
// Every tensor card drawn: what each shows.
async function checkTensors(page, until) {
  await until((s) => s.images.length >= 5, "five tensor cards");
  const t0 = Date.now();
  for (;;) {
    const cards = await page.evaluate(() => [...document.querySelectorAll(".imgcard")].map((card) => {
      const c = card.querySelector("canvas");
      const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let ink = 0;
      for (let i = 0; i < px.length; i += 4) {
        if (px[i + 3] > 0 && !(px[i] === 255 && px[i + 1] === 255 && px[i + 2] === 255)) ink++;
      }
      return {
        title: card.querySelector(".ititle").textContent,
        caption: card.querySelector(".icap").textContent,
        width: c.width, height: c.height, ink, first: [...px.slice(0, 4)],
      };
    }));
    if (cards.length >= 5 && cards.every((c) => !c.caption.startsWith("waiting"))) return { cards };
    if (Date.now() - t0 > LIMIT_MS) throw new Error(`timed out: every card drawn: ${JSON.stringify(cards)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function checkNewRun(page, until) {
  const s = await until(
    (s) => s.panels.length > 0 && s.panels.every((p) => p.columns > 0) && s.frames > 0,
    "the new run drawn",
  );
  checkPanels(s);
  check(s.panels.every((p) => p.pids.length === 1 && p.pids[0] === runPid),
    `every panel shows run ${runPid}: ${JSON.stringify(s.panels.map((p) => [p.title, p.pids]))}`);
  check(s.images.length === 1 && s.images[0].pid === runPid && s.images[0].ended === null,
    `the image view shows run ${runPid}, live: ${JSON.stringify(s.images)}`);
  const caption = await page.evaluate(() => document.querySelector(".imgcard .irun").textContent);
  check(caption.includes(`pid ${runPid}`) && caption.includes("live"), `the image is labelled with its run: ${caption}`);
  const ended = await page.evaluate(() => document.querySelectorAll("#series-list > .sgroup.ended").length);
  check(ended > 0, "the previous run is listed as ended");
  return { run: s };
}

// The default view at two moments (history drawn; live), the sidebar, and a second page.
async function checkViews(page, context, until, state) {
  // 1. The history held by the plotter, drawn: every panel has data, the image a frame.
  const history = await until(
    (s) => s.plotted > 0 && s.panels.length > 0 && s.panels.every((p) => p.columns > 0) && s.frames > 0,
    "every default panel drawn with data, and an image frame",
  );
  await page.screenshot({ path: historyShot, fullPage: true });
  checkPanels(history);
  const text = await page.evaluate(() => document.body.innerText);
  check(!text.includes("waiting for data"), "no 'waiting for data' once data is drawn");
  // Summary schemas: one collapsed section in the sidebar, none of their fields at top level.
  const sidebar = await page.evaluate(() => {
    const sum = document.querySelector("#series-list details.summaries");
    const top = [...document.querySelectorAll("#series-list > .sgroup .item .name")].map((e) => e.textContent);
    return {
      summaries: !!sum,
      open: !!sum && sum.open,
      summaryRows: sum ? sum.querySelectorAll(".item").length : 0,
      top,
    };
  });
  history.sidebar = sidebar;
  check(sidebar.summaries && !sidebar.open && sidebar.summaryRows > 0, `summaries collapsed: ${JSON.stringify(sidebar)}`);
  check(!sidebar.top.some((n) => n.startsWith("stats.")), `no stats.* at top level: ${JSON.stringify(sidebar.top)}`);
  check(history.images.length === 1 && history.images[0].pid > 0 && history.images[0].started > 0,
    `one image, labelled with its run: ${JSON.stringify(history.images)}`);

  // 2. A second page at the same time, then closed: the first keeps streaming.
  const second = await context.newPage();
  await second.goto(url, { waitUntil: "load" });
  const secondUntil = async () => {
    const t0 = Date.now();
    while (!(await second.evaluate(() => !!window.snapbus && window.snapbus.messages > 0))) {
      if (Date.now() - t0 > LIMIT_MS) throw new Error("timed out: the second page receives the stream");
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  await secondUntil();
  await second.close();

  // 3. Live: stream messages after the second page closed, with data newer than the history.
  const before = (await state()).messages;
  const live = await until(
    (s) => s.messages > before + 2 && s.live > 0 && s.dataTo > history.dataTo &&
      s.panels.every((p) => p.columns > 0),
    "live data newer than the history, drawn in every panel",
  );
  await page.screenshot({ path: liveShot, fullPage: true });
  checkPanels(live);
  return { history, live };
}

try {
  const context = await browser.newContext({ viewport: { width: 1600, height: 1400 } });
  const page = await context.newPage();
  page.on("console", (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
  page.on("pageerror", (e) => consoleLines.push(`[pageerror] ${e.message}`));
  const state = () => page.evaluate(() => JSON.parse(JSON.stringify(window.snapbus)));
  const until = async (cond, what) => {
    const t0 = Date.now();
    for (;;) {
      last = await state();
      if (await cond(last)) return last;
      if (Date.now() - t0 > LIMIT_MS) throw new Error(`timed out: ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  await page.goto(url, { waitUntil: "load" });
  const result = newRun
    ? await checkNewRun(page, until)
    : tensors ? await checkTensors(page, until) : await checkViews(page, context, until, state);
  console.log(JSON.stringify(result));
} catch (e) {
  failed = e;
} finally {
  await browser.close();
}
if (failed) {
  console.error(String(failed));
  console.error(JSON.stringify(last));
  console.error(consoleLines.join("\n"));
  process.exit(1);
}
