// A gateway in this process, from a config file's object and CLI flags, with a silent logger and no
// process metrics: what the raw-socket edge suites (edge.test.ts, edge-bounds.test.ts) run against.
import { pino } from 'pino'
import {
  createGateway,
  type Gateway,
  type GatewayFile,
  type GatewayOptions,
  parseFlags,
  resolveConfig,
  validateConfigFile,
} from '../../src/gateway/index.js'
import { uniquePrefix } from './redis.js'

/**
 * Start a gateway on a free port under a fresh key prefix (`admin: false` unless `file` says
 * otherwise). It joins `gateways`, which the suite closes after each test. `lean` picks the lean
 * paths, both or each (GatewayOptions.lean; undefined: the gateway's default).
 */
export async function startInProcess(
  gateways: Gateway[],
  file: Record<string, unknown>,
  flags: string[] = [],
  lean?: GatewayOptions['lean'],
): Promise<{ port: number; gateway: Gateway }> {
  const config = resolveConfig(
    validateConfigFile({ admin: false, ...file }) as GatewayFile,
    parseFlags(['--port', '0', '--prefix', uniquePrefix().slice(0, -1), ...flags]),
  )
  const options = { logger: pino({ level: 'silent' }), processMetrics: false }
  const gateway = createGateway(config, lean === undefined ? options : { ...options, lean })
  gateways.push(gateway)
  const { url } = await gateway.listen()
  return { port: Number(new URL(url).port), gateway }
}

/** A counter's value summed over its labels (gateway.metrics.refused, .upstreamErrors, ...). */
export async function counterTotal(counter: {
  get(): Promise<{ values: readonly { value: number }[] }>
}): Promise<number> {
  return (await counter.get()).values.reduce((sum, value) => sum + value.value, 0)
}
