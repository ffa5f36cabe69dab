// tollgate's dashboard, in the browser: polls /dashboard/data.json (the admin listener caches one
// snapshot a second, whoever asks) and draws it with DOM calls only (textContent: bucket names are
// request data, never markup). Limits are set through the admin API (/limits), with the admin token
// when one is needed: kept in this page's memory only, sent only as a bearer token (no cookie, so no
// cross-site request can borrow it).
// @ts-check: type-checked against the data's contract, src/gateway/ops/dashboard-data.ts
// (tsconfig.json here; `npm run typecheck`).
/* global document, window, fetch, HTMLTableSectionElement */
'use strict'

/** @typedef {import('../dashboard-data.js').DashboardData} Data */
/** @typedef {Data['routes'][number]} Route */
/** @typedef {Route['history'][number]} Point */

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

/** The element of `id`: index.html has every one this page asks for.
 * @param {string} id
 * @returns {HTMLElement} */
function byId(id) {
  const found = document.getElementById(id)
  if (!found) throw new Error(`index.html has no #${id}`)
  return found
}

/** The body of table `id`, as index.html has it.
 * @param {string} id
 * @returns {HTMLTableSectionElement} */
function tbody(id) {
  const found = document.querySelector(`#${id} tbody`)
  if (!(found instanceof HTMLTableSectionElement)) throw new Error(`index.html has no #${id} tbody`)
  return found
}

function el(tag, attributes, ...children) {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== undefined && value !== false) node.setAttribute(name, value === true ? '' : String(value))
  }
  for (const child of children) node.append(child)
  return node
}

function svg(tag, attributes) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag)
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value))
  return node
}

function text(node, value) {
  const shown = value === undefined || value === null ? '–' : String(value)
  if (node.textContent !== shown) node.textContent = shown
}

function ms(value) {
  if (value === undefined || value === null) return '–'
  return value < 10 ? `${value.toFixed(1)} ms` : `${Math.round(value)} ms`
}

function ago(at) {
  if (!at) return '–'
  const seconds = Math.max(0, Math.round((Date.now() - at) / 1000))
  const when = new Date(at).toLocaleTimeString()
  return seconds < 120 ? `${when} (${seconds} s ago)` : when
}

/** The store's state (a live region: it speaks when the state changes, not at every poll). */
function say(message, bad) {
  const status = byId('status')
  text(status, message)
  status.className = bad ? 'bad' : ''
}

/** The result of what the user did (its own live region: a poll never writes over it). */
function tell(message, bad) {
  const result = byId('result')
  text(result, message)
  result.className = bad ? 'bad' : ''
}

async function poll() {
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
    window.setTimeout(poll, POLL_MS)
  }
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

/** A route's last minutes in `figure` (after its caption): in flight, waiting and the limit in force,
 * one point a second, with a scale on each axis.
 * @param {HTMLElement} figure @param {Route} route */
function drawChart(figure, route) {
  const width = 520
  const height = 170
  const left = 40
  const right = 10
  const top = 10
  const bottom = 24
  const points = route.history
  const peak = Math.max(1, ...points.map((p) => Math.max(p.fleet ?? p.local, p.queued ?? 0, p.limit ?? 0)))
  // A scale of round steps: 1, 2 or 5 times a power of ten, at most 4 steps up to the peak.
  const power = 10 ** Math.floor(Math.log10(peak / 4))
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s * 4 >= peak) ?? power * 10
  const most = Math.max(step, Math.ceil(peak / step) * step)
  const now = points.length > 0 ? /** @type {Point} */ (points[points.length - 1]).t : Date.now()
  // The last 5 minutes; a replica up for less shows its first minute across the chart.
  const span = Math.min(
    300_000,
    Math.max(60_000, points.length > 0 ? now - /** @type {Point} */ (points[0]).t : 0),
  )
  const x = (t) => left + ((width - left - right) * (t - (now - span))) / span
  const y = (value) => height - bottom - ((height - top - bottom) * value) / most
  const line = (key, fallback, className) => {
    const coordinates = points
      .filter((p) => (p[key] ?? p[fallback]) !== null && (p[key] ?? p[fallback]) !== undefined)
      .map((p) => `${x(p.t).toFixed(1)},${y(p[key] ?? p[fallback]).toFixed(1)}`)
      .join(' ')
    return svg('polyline', { points: coordinates, class: className })
  }
  /** @param {number} atX @param {number} atY @param {string} value @param {string} anchor */
  const label = (atX, atY, value, anchor) => {
    const node = svg('text', { x: atX, y: atY, 'text-anchor': anchor, class: 'axis' })
    node.textContent = value
    return node
  }
  const marks = []
  for (let value = 0; value <= most; value += step) {
    marks.push(svg('line', { x1: left, x2: width - right, y1: y(value), y2: y(value), class: 'grid' }))
    marks.push(label(left - 6, y(value) + 4, String(value), 'end'))
  }
  const minutes = span / 60_000
  for (const ago of [minutes, minutes / 2, 0]) {
    const atX = x(now - ago * 60_000)
    marks.push(svg('line', { x1: atX, x2: atX, y1: top, y2: height - bottom, class: 'grid' }))
    const text = ago === 0 ? 'now' : `−${Number.isInteger(ago) ? ago : ago.toFixed(1)} min`
    marks.push(label(atX, height - 6, text, ago === minutes ? 'start' : ago === 0 ? 'end' : 'middle'))
  }
  /** @type {Partial<Point>} */
  const last = points[points.length - 1] || {}
  const summary = `${route.name}: in flight ${last.fleet ?? last.local ?? 0}, waiting ${last.queued ?? 0}, limit ${last.limit ?? '–'}; at most ${peak} in the last ${Math.round(span / 60_000)} minute(s)`
  const chart = svg('svg', {
    class: 'chart',
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': summary,
  })
  const title = svg('title')
  title.textContent = summary
  chart.append(
    title,
    ...marks,
    line('limit', 'limit', 'limit'),
    line('queued', 'queued', 'waiting'),
    line('fleet', 'local', 'fleet'),
  )
  const caption = figure.firstElementChild
  figure.replaceChildren(...(caption ? [caption] : []), chart)
}

/** @param {Data} data */
function renderBuckets(data) {
  const body = tbody('buckets')
  const buckets = data.routes.flatMap((route) =>
    (route.buckets || []).map((bucket) => ({ route: route.name, ...bucket })),
  )
  text(
    byId('buckets-note'),
    data.access.bucketsShown
      ? buckets.length === 0
        ? 'No per-tenant or per-address bucket was busy here in the last seconds.'
        : 'The buckets with the most requests to this replica in the last seconds (admitted, waiting or refused), with the fleet’s figures.'
      : 'Bucket names are request data (tenant ids, addresses): they are shown only where /limits would answer (the admin token beyond loopback).',
  )
  byId('buckets').hidden = buckets.length === 0
  body.replaceChildren(
    ...buckets.map((bucket) =>
      el(
        'tr',
        {},
        el('td', {}, bucket.route),
        el('th', { scope: 'row' }, bucket.bucket),
        el('td', { class: 'number' }, String(bucket.effective)),
        el('td', { class: 'number' }, String(bucket.holders)),
        el('td', { class: 'number' }, String(bucket.queued)),
      ),
    ),
  )
}

/** The busiest resources of the read/write-locked routes: who holds each lock, and who waits.
 * @param {Data} data */
function renderLocks(data) {
  const locked = data.routes.filter((route) => route.locks)
  byId('locks-section').hidden = locked.length === 0
  const locks = locked.flatMap((route) => (route.locks || []).map((lock) => ({ route: route.name, ...lock })))
  text(
    byId('locks-note'),
    data.access.bucketsShown
      ? locks.length === 0
        ? 'No read/write-locked resource was busy here in the last seconds.'
        : 'The resources with the most requests to this replica in the last seconds, with each lock as the fleet holds it: its readers, its writer, and who waits (readers and writers alike; a waiting writer holds new readers back).'
      : 'Resources are request paths: they are shown only where /limits would answer (the admin token beyond loopback).',
  )
  byId('locks').hidden = locks.length === 0
  tbody('locks').replaceChildren(
    ...locks.map((lock) =>
      el(
        'tr',
        {},
        el('td', {}, lock.route),
        el('th', { scope: 'row' }, lock.resource),
        el('td', { class: 'number' }, figure(lock.readers)),
        el('td', {}, lock.writer === null ? '–' : lock.writer ? 'writing' : 'none'),
        el('td', { class: 'number' }, figure(lock.queued)),
      ),
    ),
  )
}

/** A figure, or – where it was not read. */
function figure(value) {
  return value === null || value === undefined ? '–' : String(value)
}

/** @param {Data} data */
function renderFair(data) {
  const fair = data.routes.filter((route) => route.classes)
  byId('fair').hidden = fair.length === 0
  const cell = (value) => el('td', { class: 'number' }, figure(value))
  tbody('classes').replaceChildren(
    ...fair.flatMap((route) =>
      (route.classes ?? []).map((row) =>
        el(
          'tr',
          {},
          el('td', {}, route.name),
          el('th', { scope: 'row' }, row.class),
          cell(row.fleetWaiting),
          cell(row.waiting),
          cell(row.admitted),
          cell(row.rejected.shed ?? 0),
          cell(row.rejected.timeout ?? 0),
          cell(row.evicted),
        ),
      ),
    ),
  )
  const flows = fair.flatMap((route) => (route.flows || []).map((flow) => ({ route: route.name, ...flow })))
  text(
    byId('flows-note'),
    !data.access.bucketsShown
      ? 'Flow names are request data (tenant ids, addresses): they are shown only where /limits would answer (the admin token beyond loopback).'
      : flows.length === 0
        ? 'No flow sent this replica requests in the last seconds.'
        : 'The flows with the most requests to this replica in the last seconds, with their weight, cap and the fleet’s figures.',
  )
  byId('flows').hidden = flows.length === 0
  tbody('flows').replaceChildren(
    ...flows.map((flow) =>
      el(
        'tr',
        {},
        el('td', {}, flow.route),
        el('th', { scope: 'row' }, flow.flow),
        el('td', { class: 'number' }, `${Math.round((flow.share ?? 0) * 100)} %`),
        cell(flow.weight),
        cell(flow.max),
        cell(flow.waiting),
        cell(flow.held),
      ),
    ),
  )
}

function pairs(body, entries) {
  body.replaceChildren(
    ...entries.map(([name, value]) => el('tr', {}, el('th', { scope: 'row' }, name), el('td', {}, value))),
  )
}

/** @param {Data['store']} store */
function renderStore(store) {
  const latency = Object.entries(store.latency || {})
    .filter(([, l]) => l.count > 0)
    .map(([call, l]) => `${call} ${ms(l.p50Ms)} / ${ms(l.p99Ms)}`)
    .join('; ')
  pairs(tbody('store'), [
    ['Kind', store.kind],
    ['State', store.up ? 'up' : `down since ${ago(store.downSince)}`],
    ['Outages since this replica started', String(store.outages)],
    [
      'Last outage',
      store.lastOutage
        ? `${ago(store.lastOutage.from)} for ${store.lastOutage.ms === null ? 'now' : `${Math.round(store.lastOutage.ms)} ms`}`
        : 'none',
    ],
    ['Call latency p50 / p99, last minute', latency || 'no calls'],
  ])
}

/** @param {Data['config']} config */
function renderConfig(config) {
  const last = config.lastReload
  pairs(tbody('config'), [
    ['Loaded', ago(config.loadedAt)],
    [
      'Last reload',
      last
        ? `${ago(last.at)}: ${last.ok ? (last.message ?? 'applied') : `failed, the running config stays: ${last.message}`}`
        : 'none since start',
    ],
    ['Routes', String(config.routes)],
  ])
}

/** @param {Data['changes']} changes */
function renderChanges(changes) {
  const body = tbody('changes')
  body.replaceChildren(
    ...(changes.length === 0
      ? [el('tr', {}, el('td', { colspan: 5 }, 'No change seen since this replica started.'))]
      : changes.map((change) =>
          el(
            'tr',
            {},
            el('td', {}, ago(change.at)),
            el('th', { scope: 'row' }, change.route),
            el('td', { class: 'number' }, String(change.from)),
            el('td', { class: 'number' }, String(change.to)),
            el('td', {}, change.by),
          ),
        )),
  )
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
})

void poll()
