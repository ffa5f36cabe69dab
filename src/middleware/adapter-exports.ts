// The types and helpers every adapter's entry point (tollgate/express, /koa, /fastify, /hono) re-exports,
// in one place so the four entry points offer the same.
export type { OnLost, Rejection, RejectReason, TollgateInfo } from '../admission/admission.js'
export type { AdmissionCounters } from '../admission/metrics.js'
export type {
  CommonOptions,
  Logger,
  RwlockMiddlewareOptions,
  SemaphoreMiddlewareOptions,
} from '../admission/options.js'
export { DEFAULT_BUCKET, normalizeKey } from '../admission/keys.js'
