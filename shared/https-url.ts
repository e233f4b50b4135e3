// The one rule for URLs that the platform will call or hand to clients as HTTPS entry points
// (webhooks, Mini Apps): absolute, https, no credentials in the URL.

/** Why `raw` is not an acceptable HTTPS URL (`what` names it in the reason), or undefined when it is. */
export function httpsUrlProblem(raw: string, what: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `the ${what} is not a valid URL`;
  }
  if (url.protocol !== "https:") return `the ${what} must use https`;
  if (url.username || url.password) return `the ${what} must not carry credentials`;
  return undefined;
}
