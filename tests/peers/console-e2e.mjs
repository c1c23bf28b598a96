// The web console's browser (tests/it/console.rs): Debian's chromium, headless, driven by
// playwright-core. It reads one JSON command a line on stdin and answers each with one JSON
// line on stdout ({"ok": …} or {"error": "…"}), so the Rust test decides what happens between
// the browser's steps (a message sent, an approval asked for).
//
//   node console-e2e.mjs BASE_URL SCREENSHOT_DIR
//
// Environment: CHROMIUM (the browser's path; default /usr/bin/chromium).
import { createInterface } from "node:readline";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, shots] = process.argv.slice(2);
mkdirSync(shots, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox"],
});
const context = await browser.newContext({ baseURL: base });
const page = await context.newPage();
// Anything the page's script says went wrong, and every resource the CSP refused.
const problems = [];
page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
page.on("response", (r) => {
  if (r.status() >= 400) problems.push(`${r.status()} ${r.url()}`);
});
page.on("console", (m) => {
  if (m.type() === "error") problems.push(`console: ${m.text()}`);
});

const TIMEOUT = 30000;

async function run(c) {
  switch (c.cmd) {
    case "goto": {
      const r = await page.goto(c.path, { waitUntil: "load" });
      return { status: r ? r.status() : 0, url: page.url() };
    }
    case "login": {
      await page.goto("/console/login");
      await page.getByLabel("Operator token").fill(c.token);
      await Promise.all([
        page.waitForLoadState("load"),
        page.getByRole("button", { name: "Sign in" }).click(),
      ]);
      await page.waitForLoadState("load");
      return { url: page.url(), title: await page.title() };
    }
    case "fill":
      await page.locator(c.selector).fill(c.value, { timeout: TIMEOUT });
      return {};
    case "click": {
      const [response] = await Promise.all([
        page.waitForNavigation({ timeout: TIMEOUT }),
        page.locator(c.selector).click({ timeout: TIMEOUT }),
      ]);
      return { status: response ? response.status() : 0, url: page.url() };
    }
    case "press": {
      // The keyboard alone: focus the control, press Enter.
      await page.locator(c.selector).focus({ timeout: TIMEOUT });
      const [response] = await Promise.all([
        page.waitForNavigation({ timeout: TIMEOUT }),
        page.keyboard.press(c.key || "Enter"),
      ]);
      return { status: response ? response.status() : 0, url: page.url() };
    }
    case "waitText":
      await page
        .locator(c.selector, { hasText: c.text })
        .first()
        .waitFor({ timeout: c.timeout || TIMEOUT });
      return {};
    case "text":
      return { text: await page.locator(c.selector).first().innerText({ timeout: TIMEOUT }) };
    case "count":
      return { count: await page.locator(c.selector).count() };
    case "viewport":
      await page.setViewportSize({ width: c.width, height: c.height });
      return {};
    case "screenshot":
      await page.screenshot({ path: join(shots, `${c.name}.png`), fullPage: true });
      return {};
    case "post": {
      // A POST from this browser's session (its cookie), as a page's form would send it.
      const r = await context.request.post(c.path, {
        form: c.form,
        maxRedirects: 0,
        headers: { origin: c.origin || base },
      });
      return { status: r.status() };
    }
    case "cookies":
      return { cookies: await context.cookies() };
    case "problems":
      return { problems: problems.splice(0) };
    case "close":
      await browser.close();
      return {};
    default:
      throw new Error(`no command ${c.cmd}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = { ok: await run(JSON.parse(line)) };
  } catch (e) {
    answer = { error: String(e && e.message ? e.message : e) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
  if (answer.ok && JSON.parse(line).cmd === "close") break;
}
await browser.close().catch(() => {});
