// The dashboard's HTTP rules: which path is which file, the headers every answer carries, and the
// ?since= of a poll of data.json.
import { HttpError } from './http-error.js'

/** The page's response headers: nothing from elsewhere, no framing, no inline script or style. */
export const DASHBOARD_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
}

/** The file of the dashboard a path asks for (index.html for / and /dashboard); undefined for a path
 * that is not the dashboard's. */
export function dashboardFile(path: string): string | undefined {
  if (path === '/' || path === '/dashboard' || path === '/dashboard/') return 'index.html'
  return path.startsWith('/dashboard/') ? path.slice('/dashboard/'.length) : undefined
}

/** The ?since= of a data.json request: the wall-clock ms of the newest point the viewer holds
 * (undefined: none, it is sent the whole history). Any other query parameter is ignored, as on every
 * path of this listener; a since that is not a whole number of ms, or is given twice, is refused. */
export function sinceOf(url: string): number | undefined {
  const query = url.indexOf('?')
  if (query < 0) return undefined
  const values = new URLSearchParams(url.slice(query + 1)).getAll('since')
  if (values.length === 0) return undefined
  if (values.length > 1) throw new HttpError(400, 'since must be given once')
  const value = values[0] as string
  if (!/^\d{1,15}$/.test(value))
    throw new HttpError(
      400,
      'since must be the whole number of ms of the last point the page holds (data.json "at")',
    )
  return Number(value)
}
