// An adaptive limit's options as the middleware and the gateway take them (the controller's, which
// outcomes are drops, the scope), validated; and how a request ended, and whether that is a drop.
import { ConfigError } from '../../core/errors.js'
import {
  type AdaptiveLimitOptions,
  parseAdaptiveLimitOptions,
  type ResolvedAdaptiveLimitOptions,
} from './controller.js'

export type { AdaptiveLimitOptions } from './controller.js'

/** What counts as a drop: an upstream status, every 5xx, or a timeout (no answer in time). */
export type DropRule = number | '5xx' | 'timeout'

export interface AdaptiveOptions extends AdaptiveLimitOptions {
  /** Which outcomes are drops (back off, whatever the latency, once more than `dropShare` of a
   * window's requests are). Not 429 by default: it usually answers one user, not the upstream's
   * load; add it for an upstream that says "overloaded" with a 429. @default ['timeout', 503] */
  drops?: readonly DropRule[]
  /** 'fleet': one limit for every process sharing the store; 'local': this process's own.
   * @default 'fleet' */
  scope?: 'fleet' | 'local'
}

export interface ResolvedAdaptiveOptions extends ResolvedAdaptiveLimitOptions {
  drops: readonly DropRule[]
  scope: 'fleet' | 'local'
}

/** How a request admitted under an adaptive limit ended; undefined: it did not (the client left
 * before its response): not counted. */
export interface Outcome {
  /** The response's status. */
  status?: number | undefined
  /** No answer in time (the gateway's upstream timeout). */
  timedOut?: boolean | undefined
  /** A drop, whatever the rules say (a library lease marked with `adaptive.dropped()`). */
  dropped?: boolean | undefined
}

const DEFAULT_DROPS: readonly DropRule[] = Object.freeze(['timeout', 503])

/** Validate an adaptive limit's options (ConfigError naming the option; `at` prefixes names, e.g.
 * "adaptive."). */
export function parseAdaptiveOptions(options: unknown, at = 'adaptive.'): ResolvedAdaptiveOptions {
  const object = typeof options === 'object' && options !== null && !Array.isArray(options)
  // drops and scope are this layer's; the rest are the controller's (unknown ones refused there).
  const { drops, scope, ...controller } = (object ? options : {}) as Record<string, unknown>
  const resolved = parseAdaptiveLimitOptions(object ? controller : options, at)
  let rules = DEFAULT_DROPS
  if (drops !== undefined) {
    if (
      !Array.isArray(drops) ||
      !drops.every(
        (rule) =>
          rule === '5xx' ||
          rule === 'timeout' ||
          (typeof rule === 'number' && Number.isInteger(rule) && rule >= 400 && rule <= 599),
      )
    ) {
      throw new ConfigError(`${at}drops`, "a list of statuses (400-599), '5xx' and 'timeout'", drops)
    }
    rules = Object.freeze([...(drops as DropRule[])])
  }
  if (scope !== undefined && scope !== 'fleet' && scope !== 'local')
    throw new ConfigError(`${at}scope`, "'fleet' or 'local'", scope)
  return { ...resolved, drops: rules, scope: (scope as 'fleet' | 'local' | undefined) ?? 'fleet' }
}

/** Whether an outcome is a drop under `rules`. */
export function isDrop(outcome: Outcome, rules: readonly DropRule[]): boolean {
  if (outcome.dropped) return true
  if (outcome.timedOut) return rules.includes('timeout')
  const status = outcome.status
  if (status === undefined) return false
  return rules.includes(status) || (status >= 500 && status <= 599 && rules.includes('5xx'))
}
