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
