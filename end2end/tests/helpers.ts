import { expect, Page } from "@playwright/test";

export const PASSWORD = process.env.DOCFLOW_DEMO_PASSWORD ?? "docflow-demo";

/** Waits until the WASM app has hydrated the page, so clicks are heard. */
export async function hydrated(page: Page) {
  await expect(page.locator("#root")).toHaveAttribute("data-hydrated", "true");
}

/** Logs in through the real login page. */
export async function login(page: Page, email: string) {
  await page.goto("/login");
  await hydrated(page);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL((url) => url.pathname === "/");
  await hydrated(page);
}
