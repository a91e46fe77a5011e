// The login form: user id and password. A refusal shows one message and nothing else; a
// throttled login says when to try again.

import { ApiError } from "./api.js";
import { $, showError } from "./dom.js";

export function createLoginView(app) {
  const view = $("login-view");
  const form = $("login-form");
  const user = $("login-user");
  const password = $("login-password");
  const error = $("login-error");
  const submit = $("login-submit");

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError(error, null);
    if (!user.value.trim() || !password.value) {
      showError(error, "Enter your user id and password.");
      return;
    }
    submit.disabled = true;
    try {
      await app.login(user.value.trim(), password.value);
      password.value = "";
    } catch (err) {
      showError(error, loginMessage(err));
      password.select();
    } finally {
      submit.disabled = false;
    }
  });

  return {
    show() {
      view.hidden = false;
      showError(error, null);
      user.focus();
    },
    hide() {
      view.hidden = true;
    },
  };
}

function loginMessage(err) {
  if (!(err instanceof ApiError)) return "Login failed.";
  if (err.status === 401) return "Wrong user id or password.";
  if (err.status === 429) return "Too many attempts; try again in " + (err.retryAfterS ?? 1) + " s.";
  if (err.code === "NETWORK") return "The server cannot be reached.";
  return "Login failed: " + err.message;
}
