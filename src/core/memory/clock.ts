// The memory store's clock: epoch milliseconds (and microseconds, for fencing tokens) from a monotonic
// source, so wall-clock jumps do not move leases (Redis TIME plays this part for the Redis store).
const origin = performance.timeOrigin

export const nowMs = (): number => Math.floor(origin + performance.now())
export const nowUs = (): number => Math.floor((origin + performance.now()) * 1000)
