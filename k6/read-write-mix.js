// Read/write mix on a few resources behind `--rwlock`: reads of a resource share its lock, a write
// excludes them. Start e.g. `npm start -- --rwlock --permits 50 --max-wait-ms 2000`, then
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e RATE=40 k6/read-write-mix.js
// Writers must not starve (the lock is writer-preferring): their failure rate and latency are bounded.
import { check } from 'k6'
import http from 'k6/http'
import { arrivals, BASE_URL, positiveInt, RATE, UPSTREAM_MS } from './lib/config.js'

const RESOURCES = positiveInt('RESOURCES', 4)
/** Share of writes in percent. */
const WRITE_PERCENT = positiveInt('WRITE_PERCENT', 10)

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    reads: arrivals('read', Math.max(1, Math.round((RATE * (100 - WRITE_PERCENT)) / 100)), { op: 'read' }),
    writes: arrivals('write', Math.max(1, Math.round((RATE * WRITE_PERCENT) / 100)), { op: 'write' }),
  },
  thresholds: {
    'http_req_failed{op:read}': ['rate<0.05'],
    'http_req_failed{op:write}': ['rate<0.05'],
    'http_req_duration{op:write}': ['p(95)<2000'],
    checks: ['rate>0.95'],
  },
}

function resource() {
  return `/docs/${Math.floor(Math.random() * RESOURCES)}/slow?ms=${UPSTREAM_MS}`
}

export function read() {
  check(http.get(`${BASE_URL}${resource()}`), { 'read: 200': (r) => r.status === 200 })
}

export function write() {
  check(http.put(`${BASE_URL}${resource()}`, 'x'), { 'write: 200': (r) => r.status === 200 })
}
