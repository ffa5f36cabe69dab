// A weighted acquisition (a semaphore's acquire({ weight })) counts for `weight` permits. The weight
// travels in the token, `<id>*<weight>`, so that every store operation and the batching stay as they
// are and an unweighted token (no '*') costs nothing more (lua/lib/permits.lua, "Weights").

/** The largest weight: a weighted hold is `weight` members of a sorted set, so its cost in Redis
 * grows with it (O(w log n) per acquire, release and renewal); 1000 keeps every script call bounded
 * (and within Lua's unpack() limits, with the coalescer's MAX_BATCH_WEIGHT). */
export const MAX_WEIGHT = 1000

/** The token of an acquisition of `weight` permits (`weight` 1: the id itself). */
export function weightedToken(id: string, weight: number): string {
  return weight === 1 ? id : `${id}*${weight}`
}

/** The permits a token counts for: 1 to MAX_WEIGHT; anything else counts 1 (as lua weight()). The
 * digits after '*' up to a '.' (a fair token, core/fair.ts, carries its discipline after them). */
export function tokenWeight(token: string): number {
  const star = token.indexOf('*')
  if (star < 0) return 1
  const dot = token.indexOf('.', star + 1)
  const weight = Number(token.slice(star + 1, dot < 0 ? undefined : dot))
  return Number.isInteger(weight) && weight >= 1 && weight <= MAX_WEIGHT ? weight : 1
}
