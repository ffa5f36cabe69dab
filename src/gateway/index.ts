// The package tollgate-gateway's entry point: run the gateway in-process (tests, embedding) with the same config the bin uses.
export { startFromArgs } from './cli.js'
export {
  type ConcurrencyConfig,
  type GatewayConfig,
  GatewayConfigError,
  type GatewayFile,
  type GatewayFlags,
  GATEWAY_DEFAULTS,
  loadConfig,
  type LogFormat,
  type LogLevel,
  parseFlags,
  type Per,
  readConfigFile,
  resolveConfig,
  type RouteConfig,
  type RwLockConfig,
  type StoreConfig,
  type TrustProxy,
  validateConfigFile,
} from './config/index.js'
export type { GatewayMetrics } from './ops/metrics.js'
export type { UpstreamError, UpstreamErrorKind } from './http/proxy.js'
export {
  createGateway,
  FENCING_HEADER,
  type Gateway,
  type GatewayOptions,
  type StoreState,
} from './server.js'
