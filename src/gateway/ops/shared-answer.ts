// An answer computed at most once per interval, whoever asks and however many ask at once: a scrape,
// a probe or a poll of the dashboard costs the store one computation a second, not one per request.

/** How old a shared answer of the admin listener may be (/metrics, /readyz's PING, data.json). */
export const ANSWER_INTERVAL_MS = 1000

/**
 * `compute` behind a share: the first asker starts it, and everyone asking while it runs or within
 * `intervalMs` of its start gets the same promise (its failure too). A new computation starts only
 * once the last one has settled and started at least `intervalMs` ago: never two in flight, and at
 * most one per interval.
 */
export function sharedAnswer<T>(intervalMs: number, compute: () => Promise<T>): () => Promise<T> {
  let last: { at: number; answer: Promise<T>; settled: boolean } | undefined
  return () => {
    const now = performance.now()
    if (last && (!last.settled || now - last.at < intervalMs)) return last.answer
    const current = { at: now, answer: new Promise<T>((resolve) => resolve(compute())), settled: false }
    const settle = () => {
      current.settled = true
    }
    current.answer.then(settle, settle)
    last = current
    return current.answer
  }
}
