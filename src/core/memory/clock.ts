// The memory store's clock: epoch milliseconds (and microseconds, for fencing tokens) from the core's
// monotonic clock, so wall-clock jumps do not move leases (Redis TIME plays this part for the Redis
// store). It is the local clock itself: the store's clock offset is 0.
import { monoNow } from '../clock.js'

export const nowMs = (): number => Math.floor(monoNow())
export const nowUs = (): number => Math.floor(monoNow() * 1000)
