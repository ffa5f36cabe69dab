// Smoke: a low steady rate through the gateway; every request must pass and be quick. Run it after a
// deploy: k6 run -e BASE_URL=http://127.0.0.1:8080 k6/smoke.js
import { check } from 'k6'
import http from 'k6/http'
import { arrivals, BASE_URL, RATE, UPSTREAM_MS } from './lib/config.js'

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: { smoke: arrivals('smoke', Math.min(RATE, 10)) },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    http_req_duration: [`p(95)<${UPSTREAM_MS + 250}`],
    checks: ['rate>0.99'],
  },
}

export function smoke() {
  const res = http.get(`${BASE_URL}/slow?ms=${UPSTREAM_MS}`)
  check(res, {
    'status is 200': (r) => r.status === 200,
    'a fencing token reached the upstream': (r) =>
      typeof r.body === 'string' && /fencing token \d+/.test(r.body),
    'RateLimit-Policy is sent': (r) => r.headers['Ratelimit-Policy'] !== undefined,
  })
}
