// Per-tenant saturation: one tenant floods its bucket while a quiet tenant keeps a low rate. Start the
// gateway per tenant, e.g. `npm start -- --per tenant --permits 2 --max-wait-ms 200`, then
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e RATE=50 k6/tenant-saturation.js
// The flood is rejected with 429 (+ Retry-After) beyond its permits; the quiet tenant must not notice.
import { check } from 'k6'
import http from 'k6/http'
import { Counter } from 'k6/metrics'
import { arrivals, BASE_URL, RATE, TENANT_HEADER, UPSTREAM_MS } from './lib/config.js'

const floodRejected = new Counter('flood_rejected')

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    flood: arrivals('flood', RATE, { tenant: 'flood' }),
    quiet: arrivals('quiet', 2, { tenant: 'quiet' }),
  },
  thresholds: {
    // The quiet tenant is isolated: no failures, no queueing behind the flood.
    'http_req_failed{tenant:quiet}': ['rate<0.01'],
    'http_req_duration{tenant:quiet}': [`p(95)<${UPSTREAM_MS + 250}`],
    // The flood is capped, so some of it must have been turned away.
    flood_rejected: ['count>0'],
    'checks{tenant:flood}': ['rate>0.99'],
  },
}

/** @param {string} tenant */
function get(tenant) {
  return http.get(`${BASE_URL}/slow?ms=${UPSTREAM_MS}`, {
    headers: { [TENANT_HEADER]: tenant },
    // A 429 is the expected answer for the flood, not a failed request.
    responseCallback: http.expectedStatuses(200, 429),
  })
}

export function flood() {
  const res = get('flood')
  if (res.status === 429) floodRejected.add(1)
  check(res, {
    'flood: 200, or 429 with Retry-After': (r) =>
      r.status === 200 || (r.status === 429 && r.headers['Retry-After'] !== undefined),
  })
}

export function quiet() {
  check(get('quiet'), { 'quiet: 200': (r) => r.status === 200 })
}
