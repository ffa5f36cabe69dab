// File + flags + defaults -> the GatewayConfig the gateway runs on (flags win over the file, a route's
// own fields over `defaults`): the listeners, the store and the admin API, and the routes (routes.ts).
import { readConfigFile } from './file.js'
import type { GatewayFlags } from './flags.js'
import { inherited, routesOf } from './routes.js'
import type { GatewayFile } from './schema.js'
import { adminToken, redisAuth } from './secrets.js'
import {
  GATEWAY_DEFAULTS,
  type GatewayConfig,
  GatewayConfigError,
  type Issues,
  type StoreConfig,
} from './types.js'

/** Flags and an optional file (path or already-parsed object) -> the validated GatewayConfig. */
export async function loadConfig(flags: GatewayFlags): Promise<GatewayConfig> {
  const file = flags.config === undefined ? {} : await readConfigFile(flags.config)
  return resolveConfig(file, flags)
}

/** Merge a validated file with flags (flags win) and fill in the defaults. Throws GatewayConfigError. */
export function resolveConfig(file: GatewayFile, flags: GatewayFlags = {}): GatewayConfig {
  const d = GATEWAY_DEFAULTS
  const issues: Issues = []
  const store = storeOf(file, flags, issues)
  const base = inherited(file, flags)
  const routes = routesOf(file, flags, base, issues)
  if (issues.length > 0) throw new GatewayConfigError(issues)
  const fileAdmin = file.admin || undefined
  const admin =
    file.admin === false && flags.adminPort === undefined
      ? undefined
      : {
          host: flags.adminHost ?? fileAdmin?.host ?? d.adminHost,
          port: flags.adminPort ?? fileAdmin?.port ?? d.adminPort,
          token: adminToken(flags, fileAdmin?.tokenFile, issues),
        }
  if (issues.length > 0) throw new GatewayConfigError(issues)
  return {
    host: flags.host ?? file.listen?.host ?? d.host,
    port: flags.port ?? file.listen?.port ?? d.port,
    admin,
    store,
    prefix: flags.prefix ?? file.redis?.prefix ?? d.prefix,
    commandTimeoutMs: flags.commandTimeoutMs ?? file.redis?.commandTimeoutMs ?? d.commandTimeoutMs,
    ttlMs: flags.ttlMs ?? file.ttlMs ?? d.ttlMs,
    shutdownGraceMs: flags.shutdownGraceMs ?? file.shutdownGraceMs ?? d.shutdownGraceMs,
    logLevel: flags.logLevel ?? file.logLevel ?? d.logLevel,
    trustProxy: flags.trustProxy ?? file.trustProxy ?? d.trustProxy,
    logFormat: flags.logFormat ?? file.logFormat ?? d.logFormat,
    lean: flags.lean ?? file.lean ?? d.lean,
    accessLogSample: flags.accessLogSample ?? file.accessLog?.sample ?? d.accessLogSample,
    sendTimeoutMs: base.timeouts.sendMs,
    paths: {
      mergeSlashes: flags.mergeSlashes ?? file.paths?.mergeSlashes ?? d.mergeSlashes,
      escapedSlashes: flags.escapedSlashes ?? file.paths?.escapedSlashes ?? d.escapedSlashes,
    },
    routes,
  }
}

function storeOf(file: GatewayFile, flags: GatewayFlags, issues: Issues): StoreConfig {
  // Flags (or their TOLLGATE_* variables) name at most one kind; one given replaces the file's kind.
  const flagged =
    flags.redis !== undefined || flags.redisCluster !== undefined || flags.redisSentinel !== undefined
  const redis = file.redis ?? {}
  const url = flagged ? flags.redis : redis.url
  const urls = flagged ? flags.redisCluster : redis.cluster
  const sentinels = flagged ? flags.redisSentinel : redis.sentinel?.sentinels
  const kinds = [url, urls, sentinels].filter((value) => value !== undefined).length
  if (kinds > 1) {
    issues.push({ path: 'redis', message: 'give one of redis.url, redis.cluster, redis.sentinel' })
    return { kind: 'memory' }
  }
  if (kinds === 0) return { kind: 'memory' }
  const auth = redisAuth(file, flags, issues)
  if (url !== undefined) return { kind: 'redis', url, ...auth }
  if (urls !== undefined) return { kind: 'cluster', urls, ...auth }
  return {
    kind: 'sentinel',
    sentinels: sentinels!,
    name: flags.redisSentinelName ?? redis.sentinel?.name ?? GATEWAY_DEFAULTS.sentinelName,
    ...auth,
  }
}
