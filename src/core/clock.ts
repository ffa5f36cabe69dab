// The local clock of every lease deadline, renewal and wait: monotonic, on the epoch scale, so a
// stepped wall clock (NTP, a suspended VM) never moves a deadline. Read through the global
// `performance` at every call (fake timers in tests replace it).
const origin = performance.timeOrigin

/** Monotonic milliseconds on the epoch scale (fractional). */
export const monoNow = (): number => origin + performance.now()

/**
 * G4's safety margin: a lease is given up locally this long before it runs out on the store's
 * clock: 1 % of the time left for clock-rate drift between this machine and the store (RedLock's
 * drift factor), plus 5 ms for the store clock's rounding to whole ms (up to 1 ms) and timer
 * granularity (a timer fires up to a few ms late).
 */
export function driftMarginMs(remainingMs: number): number {
  return Math.ceil(Math.max(0, remainingMs) / 100) + 5
}

/**
 * The local moment by which a lease ending at `expiresAt` (store clock) has surely not yet ended on
 * the store, less the drift margin. `askedAt` is when the call that reported it was made (local),
 * `storeNow` the store's clock when it ran: the call ran at or after `askedAt`, so the lease has at
 * least `expiresAt - storeNow` left from then, however late the reply came back (G4).
 */
export function localDeadline(askedAt: number, storeNow: number, expiresAt: number): number {
  const left = expiresAt - storeNow
  return askedAt + left - driftMarginMs(left)
}
