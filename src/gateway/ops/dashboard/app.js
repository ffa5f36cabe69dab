// tollgate's dashboard, in the browser: polls /dashboard/data.json (the admin listener caches one
// snapshot a second, whoever asks) and draws it with DOM calls only (textContent: bucket names are
// request data, never markup). Limits are set through the admin API (/limits), with the admin token
// when one is needed: kept in this page's memory only, sent only as a bearer token (no cookie, so no
// cross-site request can borrow it).
// This file holds the page's state, its poll and the routes table; dom.js, chart.js and tables.js
// (loaded before it, in one scope) the rest.
// @ts-check: the four files are type-checked together against the data's contract,
// src/gateway/ops/dashboard-data.ts (tsconfig.json here; `npm run typecheck`).
'use strict'

const POLL_MS = 2000
const REASONS = ['busy', 'timeout', 'queue_full', 'shed', 'store_unavailable']
let token = ''
let access = { canWrite: false, tokenRequired: false, note: '' }
/** Rows of the routes table by route name, made once (so a focused input keeps its focus). */
const rows = new Map()
/** Points of each route's chart (one a second, the last 300), kept across polls: once the page holds
 * a route's history, a poll names its newest point (?since=) and is sent the last seconds only. */
const HISTORY = 300
let histories = new Map()
let newest
/** The process whose points the page holds (data.replica.boot). */
let boot

/** The next poll's timer; whether a poll is on its way, and whether another was asked for meanwhile. */
let pollTimer = 0
let polling = false
let pollAgain = false

async function poll() {
  window.clearTimeout(pollTimer)
  polling = true
  try {
    // With the token (once entered), the busiest buckets' names are shown too (as /limits shows them).
    const url = newest === undefined ? '/dashboard/data.json' : `/dashboard/data.json?since=${newest}`
    const response = await fetch(url, {
      cache: 'no-store',
      headers: token ? { authorization: `Bearer ${token}` } : {},
    })
    if (!response.ok) throw new Error(`the admin listener answered ${response.status}`)
    render(await response.json())
  } catch (error) {
    say(`Could not read this replica's data: ${/** @type {Error} */ (error).message}. Retrying.`, true)
  } finally {
    polling = false
    pollTimer = window.setTimeout(poll, pollAgain ? 0 : POLL_MS)
    pollAgain = false
  }
}

/** Poll now (once the one on its way is done), not at the next tick: one chain of polls, never two. */
function pollNow() {
  if (polling) pollAgain = true
  else void poll()
}

/** Each route's whole history into data.routes: what the page held, and the points it was sent
 * (all of them when data.historySince is null; else those after it). */
/** @param {Data} data */
function mergeHistory(data) {
  const kept = new Map()
  let whole = true
  // Points of another process (a restart, another replica behind one address) do not continue these.
  if (data.replica.boot !== boot) histories = new Map()
  boot = data.replica.boot
  for (const route of data.routes) {
    // A history sent whole replaces what the page held (the clock may have stepped back meanwhile).
    let held = data.historySince === null ? [] : histories.get(route.name)
    if (held === undefined) {
      whole = false // a route new to this page: the next poll asks for every point
      held = []
    }
    const last = held.length > 0 ? held[held.length - 1].t : Number.NEGATIVE_INFINITY
    route.history = held.concat(route.history.filter((p) => p.t > last)).slice(-HISTORY)
    kept.set(route.name, route.history)
  }
  histories = kept
  const ends = data.routes
    .filter((r) => r.history.length > 0)
    .map((r) => /** @type {Point} */ (r.history[r.history.length - 1]).t)
  newest = whole && ends.length > 0 ? Math.max(...ends) : undefined
}

/** @param {Data} data */
function render(data) {
  mergeHistory(data)
  text(byId('replica'), `${data.replica.version} · pid ${data.replica.pid}`)
  const store = data.store
  say(
    store.up
      ? store.answering === false
        ? `Store ${store.kind}: not answering (reads of the fleet's figures timed out). Fleet figures are missing.`
        : `Store ${store.kind}: up.`
      : `Store ${store.kind}: DOWN since ${ago(store.downSince)}. Fleet figures are this replica's last; limits follow each route's outage policy.`,
    !store.up || store.answering === false,
  )
  text(byId('updated'), `Updated ${new Date(data.at).toLocaleTimeString()}.`)
  access = data.access
  renderAccess()
  renderRoutes(data.routes)
  const note = byId('routes-note')
  note.hidden = data.routes.length >= data.config.routes
  text(
    note,
    `The first ${data.routes.length} of ${data.config.routes} routes are shown (the dashboard's cap); /limits and /metrics list them all.`,
  )
  renderBuckets(data)
  renderLocks(data)
  renderFair(data)
  renderStore(store)
  renderConfig(data.config)
  renderChanges(data.changes)
}

function renderAccess() {
  text(byId('access-note'), access.note)
  const form = byId('token-form')
  form.hidden = !access.tokenRequired
}

/** @param {Route['limit']} limit @param {Route['outage']} outage */
function limitCell(limit, outage) {
  if (!limit) return '–'
  if (outage) {
    const split = outage.replicas === null ? 'replicas not counted yet' : `${outage.replicas} replicas`
    return `${outage.share} here (store down: this replica's share of ${outage.of}, ${split}; ${outage.inMemory} in flight)`
  }
  return String(limit.effective)
}

/** @param {NonNullable<Route['limit']>['adaptive']} adaptive */
function adaptiveText(adaptive) {
  if (!adaptive) return 'off'
  const parts = [`${adaptive.limit} (${adaptive.min}–${adaptive.max})`]
  if (adaptive.minRttMs !== undefined && adaptive.minRttMs !== null)
    parts.push(`base ${ms(adaptive.minRttMs)}`)
  if (adaptive.rttMs !== undefined && adaptive.rttMs !== null) parts.push(`now ${ms(adaptive.rttMs)}`)
  if (!adaptive.storeReachable) parts.push('held: store unreachable')
  return parts.join(', ')
}

/** @param {Route['rejected']} rejected */
function rejectedText(rejected) {
  if (!rejected) return '–'
  const parts = REASONS.filter((reason) => (rejected[reason] ?? 0) > 0).map(
    (reason) => `${reason} ${rejected[reason]}`,
  )
  return parts.length > 0 ? parts.join(', ') : 'none'
}

/** @param {Route} route @param {number} index */
function makeRow(route, index) {
  const cells = {}
  const cell = (name, number) => (cells[name] = el('td', { class: number ? 'number' : undefined }))
  const heading = el('th', { scope: 'row' }, route.name)
  const control = el('td')
  const row = el(
    'tr',
    {},
    heading,
    cell('effective', true),
    cell('configured', true),
    cell('override', true),
    cell('adaptive'),
    cell('fleetInFlight', true),
    cell('localInFlight', true),
    cell('fleetQueued', true),
    cell('localQueued', true),
    cell('wait'),
    cell('rejected'),
    cell('kept', true),
    control,
  )
  if (route.settable) {
    const id = `limit-${index}`
    const input = el('input', { id, type: 'number', min: 1, max: 1000000, step: 1, inputmode: 'numeric' })
    const set = el('button', { type: 'submit' }, 'Set')
    const reset = el('button', { type: 'button', class: 'secondary' }, 'Reset')
    const form = el(
      'form',
      { class: 'limit', 'aria-label': `Set the limit of ${route.name}` },
      el('label', { for: id, class: 'visually-hidden' }, `New limit for ${route.name}`),
      input,
      set,
      reset,
    )
    form.addEventListener('submit', (event) => {
      event.preventDefault()
      const permits = Number(input.value)
      if (!Number.isInteger(permits) || permits < 1) {
        tell(`Enter a whole number of at least 1 for ${route.name}.`, true)
        input.focus()
        return
      }
      void change(route.name, 'PUT', permits)
    })
    reset.addEventListener('click', () => void change(route.name, 'DELETE'))
    control.append(form)
    cells.buttons = [input, set, reset]
  } else {
    control.textContent = route.limited ? 'per bucket: /limits' : 'not limited'
  }
  cells.chart = el('figure', { class: 'chart' }, el('figcaption', {}, route.name))
  return { row, cells }
}

/** @param {Route[]} routes */
function renderRoutes(routes) {
  const body = tbody('routes')
  const names = routes.map((route) => route.name).join('\n')
  if (body.dataset.names !== names) {
    rows.clear()
    body.replaceChildren()
    const charts = byId('charts')
    charts.replaceChildren()
    routes.forEach((route, index) => {
      const made = makeRow(route, index)
      rows.set(route.name, made)
      body.append(made.row)
      charts.append(made.cells.chart)
    })
    body.dataset.names = names
  }
  for (const route of routes) {
    const { cells } = rows.get(route.name)
    const limit = route.limit
    text(cells.effective, limitCell(limit, route.outage))
    text(cells.configured, limit && (limit.adaptive ? `${limit.configured} (initial)` : limit.configured))
    text(cells.override, limit && (limit.override ?? 'none'))
    text(cells.adaptive, limit ? adaptiveText(limit.adaptive) : '–')
    text(cells.fleetInFlight, route.fleet ? route.fleet.holders : '–')
    text(cells.localInFlight, route.local.inFlight)
    text(cells.fleetQueued, route.fleet ? route.fleet.queued : '–')
    text(cells.localQueued, route.local.queued)
    text(cells.wait, route.wait.count > 0 ? `${ms(route.wait.p50Ms)} / ${ms(route.wait.p99Ms)}` : 'no waits')
    text(cells.rejected, rejectedText(route.rejected))
    text(cells.kept, route.local.kept)
    drawChart(cells.chart, route)
    for (const button of cells.buttons || []) button.disabled = !canWrite()
  }
}

function canWrite() {
  return access.canWrite && (!access.tokenRequired || token !== '')
}

async function change(route, method, permits) {
  /** @type {Record<string, string>} */
  const headers = {}
  if (method === 'PUT') headers['content-type'] = 'application/json'
  if (token) headers.authorization = `Bearer ${token}`
  try {
    const response = await fetch(`/limits/${encodeURIComponent(route)}`, {
      method,
      headers,
      body: method === 'PUT' ? JSON.stringify({ permits }) : undefined,
      cache: 'no-store',
    })
    const body = await response.json().catch(() => ({}))
    if (!response.ok) throw new Error(body.error || `the admin API answered ${response.status}`)
    tell(
      method === 'PUT'
        ? `${route}: limit set to ${permits} for every replica sharing the store.`
        : `${route}: override dropped; the configured or adaptive limit applies again.`,
      false,
    )
  } catch (error) {
    tell(`${route}: ${/** @type {Error} */ (error).message}`, true)
  }
}

byId('token-form').addEventListener('submit', (event) => {
  event.preventDefault()
  const input = /** @type {HTMLInputElement} */ (byId('token'))
  token = input.value.trim()
  input.value = ''
  tell(token ? 'Token kept for this page: setting limits is on.' : 'No token: setting limits is off.', false)
  for (const { cells } of rows.values())
    for (const button of cells.buttons || []) button.disabled = !canWrite()
  pollNow() // what the token may read (the busiest buckets' names) shows at once
})

void poll()
