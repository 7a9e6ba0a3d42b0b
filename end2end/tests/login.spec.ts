import { Page } from "@playwright/test";
import { test, expect, hydrated, login, PASSWORD } from "./helpers";

test("a demo user logs in through the page and sees the hydrated home page", async ({ page }) => {
  await login(page, "alice@acme.test");
  await expect(page.getByRole("heading", { name: "Your documents" })).toBeVisible();
  await expect(page.getByText("alice@acme.test · acme")).toBeVisible();
  // Members get no admin navigation.
  await expect(page.getByRole("link", { name: "Admin" })).toHaveCount(0);
});

test("a wrong password is refused with a message and no session", async ({ page }) => {
  await page.goto("/login");
  await hydrated(page);
  await page.getByLabel("Email").fill("alice@acme.test");
  await page.getByLabel("Password").fill(PASSWORD + "-wrong");
  await page.getByRole("button", { name: "Log in" }).click();
  await expect(page.getByRole("alert")).toContainText("wrong email or password");
  await page.goto("/");
  await expect(page).toHaveURL(/\/login$/);
});

/** Fills in and sends the login form of the page the browser is on. */
async function logInHere(page: Page, email: string) {
  await hydrated(page);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Log in" }).click();
}

test("an anonymous visitor is sent to log in and then back to the page they asked for", async ({ page }) => {
  // The server answers with the redirect itself.
  const html = { headers: { accept: "text/html" }, maxRedirects: 0 };
  const resp = await page.request.get("/admin/jobs?state=failed&tenant=globex", html);
  expect(resp.status()).toBe(302);
  expect(resp.headers()["location"]).toBe("/login?next=%2Fadmin%2Fjobs%3Fstate%3Dfailed%26tenant%3Dglobex");
  for (const path of ["/admin", "/inbox", "/search?q=harbour", "/jobs/00000000-0000-0000-0000-000000000000"]) {
    const r = await page.request.get(path, html);
    expect(r.status(), path).toBe(302);
    expect(r.headers()["location"], path).toBe(`/login?next=${encodeURIComponent(path)}`);
  }

  await page.goto("/admin/jobs?state=failed&tenant=globex");
  await expect(page).toHaveURL(/\/login\?next=%2Fadmin%2Fjobs%3Fstate%3Dfailed%26tenant%3Dglobex$/);
  await logInHere(page, "admin@demo.test");
  await page.waitForURL((url) => url.pathname === "/admin/jobs");
  expect(new URL(page.url()).search).toBe("?state=failed&tenant=globex");
  await hydrated(page);
  await expect(page.getByRole("heading", { name: "All jobs" })).toBeVisible();
  await expect(page.getByLabel("State")).toHaveValue("failed");
  await expect(page.getByLabel("Tenant")).toHaveValue("globex");
});

test("a member sent back to /admin after logging in still gets the 403 page", async ({ page }) => {
  await page.goto("/admin");
  await expect(page).toHaveURL(/\/login\?next=%2Fadmin$/);
  await logInHere(page, "alice@acme.test");
  await page.waitForURL((url) => url.pathname === "/admin");
  await hydrated(page);
  await expect(page.getByRole("heading", { name: "You are not allowed to see this page" })).toBeVisible();
  const again = await page.goto("/admin");
  expect(again?.status()).toBe(403);
});

test("a next that leads off the site is ignored: the login goes home", async ({ page }) => {
  for (const next of ["//evil.test/", "https://evil.test/", "/\\evil.test"]) {
    await page.context().clearCookies();
    await page.goto(`/login?next=${encodeURIComponent(next)}`);
    await logInHere(page, "alice@acme.test");
    await page.waitForURL((url) => url.pathname === "/", { timeout: 15_000 });
    expect(new URL(page.url()).origin, next).toBe(new URL(process.env.DOCFLOW_E2E_URL ?? "http://127.0.0.1:3000").origin);
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "Your documents" })).toBeVisible();
  }
});

test.describe("before the page hydrates", () => {
  // The form as the browser sends it alone: what a click does before the
  // WebAssembly has loaded on a busy machine.
  test.use({ javaScriptEnabled: false });

  test("the login form signs in and leads on to the page asked for", async ({ page }) => {
    await page.goto("/login?next=%2Finbox");
    await page.getByLabel("Email").fill("alice@acme.test");
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Log in" }).click();
    await expect(page).toHaveURL(/\/inbox$/);
    // Signed in: the session the form's answer set serves the API.
    expect((await page.request.get("/api/jobs")).status()).toBe(200);
  });
});
