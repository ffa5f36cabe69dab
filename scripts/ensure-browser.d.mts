// Types of scripts/ensure-browser.mjs for the tests that import it.
/** The Chromium binary: TOLLGATE_CHROMIUM, else the first of chromium, chromium-browser,
 * google-chrome-stable, google-chrome on PATH; undefined when there is none. */
export function findChromium(): string | undefined
