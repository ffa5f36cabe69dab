/* global __ENV -- k6's environment variables (typed by @types/k6) */
// Shared settings of the k6 scripts, from the environment:
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e RATE=50 k6/smoke.js
// BASE_URL is the gateway (default http://127.0.0.1:8080, what `npm start` serves). The upstream used
// in the examples is examples/demo-upstream.ts: GET /slow?ms=N answers after N ms, any method.

/** The gateway under test, without a trailing slash. */
export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '')

/** Requests started per second by each scenario (open model: arrivals do not wait for responses). */
export const RATE = positiveInt('RATE', 20)

/** How long each scenario runs, as k6 reads durations ("30s", "2m"). */
export const DURATION = __ENV.DURATION || '30s'

/** How long the upstream takes per request (the demo upstream's /slow?ms=). */
export const UPSTREAM_MS = positiveInt('UPSTREAM_MS', 100)

/** The tenant header the gateway buckets by with --per tenant. */
export const TENANT_HEADER = __ENV.TENANT_HEADER || 'x-tenant-id'

/**
 * An integer from the environment, or the default.
 * @param {string} name
 * @param {number} fallback
 * @returns {number}
 */
export function positiveInt(name, fallback) {
  const raw = __ENV[name]
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value < 1)
    throw new Error(`${name} must be a positive integer, got "${raw}"`)
  return value
}

/**
 * An open-model scenario: `rate` requests per second for DURATION, whatever the latency.
 * @param {string} exec name of the exported function to run
 * @param {number} rate
 * @param {Record<string, string>} [tags]
 * @returns {import('k6/options').ConstantArrivalRateScenario}
 */
export function arrivals(exec, rate, tags = {}) {
  return {
    executor: 'constant-arrival-rate',
    exec,
    rate,
    timeUnit: '1s',
    duration: DURATION,
    // Enough VUs for every request in flight at the upstream's latency, plus headroom for waits.
    preAllocatedVUs: Math.max(5, Math.ceil((rate * (UPSTREAM_MS + 1000)) / 1000)),
    maxVUs: Math.max(20, rate * 5),
    tags,
  }
}
