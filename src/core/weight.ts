// A weighted acquisition (a semaphore's acquire({ weight })) counts for `weight` permits. The weight
// travels in the token, `<id>*<weight>`, so that every store operation and the batching stay as they
// are and an unweighted token (no '*') costs nothing more (lua/lib/permits.lua, "Weights").

/** The token of an acquisition of `weight` permits (`weight` 1: the id itself). */
export function weightedToken(id: string, weight: number): string {
  return weight === 1 ? id : `${id}*${weight}`
}

/** The permits a token counts for. */
export function tokenWeight(token: string): number {
  const star = token.indexOf('*')
  if (star < 0) return 1
  const weight = Number(token.slice(star + 1))
  return Number.isInteger(weight) && weight > 0 ? weight : 1
}
