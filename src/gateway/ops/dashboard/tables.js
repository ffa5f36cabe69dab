// The dashboard page's tables beside the routes: the busiest buckets, the read/write locks, the fair
// routes' classes and flows, the store, the config and the limit changes (made with dom.js's helpers).
'use strict'

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
