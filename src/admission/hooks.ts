// The application's hooks of an admission (skip, onRejected, onLost, message), each called so that
// one that throws, or returns a promise that rejects, is logged and never crashes the process: the
// request is then limited, answered or kept as if the hook were absent.
import { isThenable } from '../core/thenable.js'
import type { Rejection, ResolvedConfig, TollgateInfo } from './options.js'
import { type HttpAnswer, rejectionResponse } from './response.js'

/** Call the onRejected hook. */
export function callOnRejected<Req>(
  config: ResolvedConfig<Req>,
  req: Req,
  rejection: Rejection,
  res?: unknown,
): void {
  try {
    const hook = config.onRejected as ((req: Req, rejection: Rejection, res: unknown) => unknown) | undefined
    const result: unknown = hook?.(req, rejection, res)
    // An async hook that rejects is logged too, never an unhandled rejection.
    if (isThenable(result))
      result.then(undefined, (error: unknown) => config.logger.error('tollgate: onRejected threw', { error }))
  } catch (error) {
    config.logger.error('tollgate: onRejected threw', { error })
  }
}

/** Report a lost lease (onLost, or a warning); returns true when the request should be aborted. */
export function callOnLost<Req>(config: ResolvedConfig<Req>, info: TollgateInfo, error: Error): boolean {
  const { onLost, logger } = config
  if (typeof onLost === 'function') {
    try {
      const result: unknown = onLost(info, error)
      if (isThenable(result))
        result.then(undefined, (hookError: unknown) =>
          logger.error('tollgate: onLost threw', { error: hookError }),
        )
    } catch (hookError) {
      logger.error('tollgate: onLost threw', { error: hookError })
    }
    return false
  }
  logger.warn('tollgate: lease lost while the request was in flight', { name: info.name, key: info.key })
  return onLost === 'abort'
}

/** Status, headers and body of a rejection (the `message` option's body, if given; a throwing
 * message function is logged and the default body sent). */
export function rejectionAnswer<Req>(
  config: ResolvedConfig<Req>,
  rejection: Rejection,
  req?: Req,
): HttpAnswer {
  const { name, standardHeaders, message } = config
  if (message === undefined || req === undefined) return rejectionResponse(name, rejection, standardHeaders)
  try {
    return rejectionResponse(name, rejection, standardHeaders, { req, option: message })
  } catch (error) {
    config.logger.error('tollgate: message() threw; sending the default body', { error })
    return rejectionResponse(name, rejection, standardHeaders)
  }
}

/** The `skip` option's answer: true = take no permit. A throwing (or rejecting) skip is logged and
 * the request is admitted as usual. */
export async function callSkip<Req>(config: ResolvedConfig<Req>, req: Req): Promise<boolean> {
  const skip = config.skip
  if (!skip) return false
  try {
    return Boolean(await skip(req)) // any truthy value skips, as in express-rate-limit
  } catch (error) {
    config.logger.error('tollgate: skip() threw; limiting the request as usual', { error })
    return false
  }
}
