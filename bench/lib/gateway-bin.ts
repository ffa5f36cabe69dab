// The gateway as the benchmarks run it: the built bin, as it ships (npm run build; prebench builds
// it), not src/ through tsx, whose transform adds its own per-call cost.
import { existsSync } from 'node:fs'

export const GATEWAY_BIN = 'dist/gateway/main.js'

/** Fail at once, saying what to run, when the bin was not built. */
export function requireBuiltGateway(): void {
  if (!existsSync(GATEWAY_BIN)) throw new Error(`${GATEWAY_BIN} is missing: run npm run build first`)
}

/** --permits far above any bench's connections: the limiter's cost is measured, not its queueing. */
export const UNLIMITED_PERMITS = 1000

/** The permit keep-alive variants' --permit-keepalive-ms: long enough that a busy replica rarely
 * calls Redis, short enough to bound what other replicas wait (docs/gateway/behaviour.md, "Permit
 * keep-alive"). */
export const KEEPALIVE_MS = 100
