// The gateway's configuration: types.ts (what it is), schema.ts (the file's schema), flags.ts (the
// command line), file.ts (reading a file), resolve.ts (putting them together: routes.ts, limits.ts,
// secrets.ts).
export { readConfigFile } from './file.js'
export { type GatewayFlags, parseFlags, USAGE } from './flags.js'
export { loadConfig, resolveConfig } from './resolve.js'
export { formatPath, type GatewayFile, validateConfigFile } from './schema.js'
export {
  type ConcurrencyConfig,
  GATEWAY_DEFAULTS,
  type GatewayConfig,
  GatewayConfigError,
  type LogFormat,
  type LogLevel,
  type FlowConfig,
  type Per,
  type PriorityConfig,
  type RedisAuth,
  type RedisTlsConfig,
  type RouteConfig,
  type RwLockConfig,
  type StoreConfig,
  type TimeoutsConfig,
  type TrustProxy,
} from './types.js'
