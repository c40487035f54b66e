// The coordinator's API as the page reads it: every request goes through api(), which sends the
// client token (from the page's address, #token=TOKEN) as a Bearer header where one is given.
export const POLL_MS = 2000;

const token = new URLSearchParams(location.hash.slice(1).replace(/^\/[^?&]*[?&]?/, ""))
  .get("token");

export async function api(path) {
  const r = await fetch(path, { headers: headers(), cache: "no-store" });
  if (!r.ok) {
    let why = "HTTP " + r.status;
    try { why += ": " + (await r.json()).error; } catch (e) { /* not JSON */ }
    throw new Error(path + ": " + why);
  }
  return r.json();
}

export function headers() {
  return token ? { Authorization: "Bearer " + token } : {};
}

// The part of a link that keeps the token when the page moves (#/jobs/JOB&token=...).
export function tokenSuffix() {
  return token ? "&token=" + encodeURIComponent(token) : "";
}
