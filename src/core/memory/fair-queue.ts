// One fair permit set's queue discipline (a semaphore with `overload`, core/fair.ts): the memory twin of
// lua/lib/fair.lua, the same integer arithmetic step by step (both sides must agree to the unit: the
// differential test compares them), over the twins of the keys Q, K, D and T:
//
// - order (Q): waiter token -> (4 - p) * 2^50 + S - (S mod 32) + (ticket mod 32); a plain waiter's
//   score is its ticket (the standard class, offset 0). The head of `order` is the next to admit:
//   highest class first (strict priority), smallest start tag inside a class in steps of 32 units
//   (start-time fair queuing, by flow weight), then arrival (so scores tie only in one step with
//   tickets 32 apart, never by the tokens' random bytes; lua/lib/fair.lua says why).
// - parked (K): "<flow> <score + 3 * 2^50, 16 digits> <token>" (all score 0, so ordered by bytes):
//   waiters of a capped flow that reached the head while the flow held its cap, oldest first per flow.
// - D: v[p] (the class's virtual time: the largest score admitted from it, less the offset), n[p]
//   (waiters of the class, parked included), q "<p>:<f>" (waiters of a flow in a class), h f
//   (permits held by a capped flow), k f (parked waiters of a flow), x[p] (evictions since the name
//   was last idle), sat[p].
// - tags (T): "<p>:<f>" -> (4 - p) * 2^50 + F, the flow's last finish tag in the class.
//
// Nothing here grows with flows that went idle: a flow's counts go at zero, and its finish tag goes
// once the class's virtual time has passed it (at most PRUNE_PER_GRANT per class and call), or at
// once when its last waiter leaves unserved (the refund).
import { CLASS_SPAN, type Discipline, TIE_SPAN, tagCost } from '../fair.js'
import { SortedSet } from './sorted-set.js'

/** A waiter's or holder's discipline, as its token carries it (parseFairToken). */
export type TokenDiscipline = Discipline & { weight: number }

/** Finish tags at or below V that one call prunes per class it granted from. */
export const PRUNE_PER_GRANT = 16
/** A quiescent class whose V reached this is rebased towards 0 (lua fair.lua rebase). */
export const REBASE_AT = 2 ** 40
/** Finish tags a rebasing class prunes per call. */
export const REBASE_PRUNE = 100
/** Start tags at or past this saturate the class: it falls back to arrival order until it empties. */
export const SATURATED_BASE = CLASS_SPAN - 2 ** 32
/** A saturated class's waiters: SATURATED_BASE + (ticket mod SATURATED_SPAN). */
export const SATURATED_SPAN = 2 ** 31
/** Parked waiters one call brings back when nothing is held (lua fq.heal: ZRANGE K 0 99). */
export const HEAL_MOST = 100
/** How far a parked member's number is shifted so that every class's score is non-negative. */
const PARK_SHIFT = 3 * CLASS_SPAN
const CLASSES = 8

/** The score offset of class p: (4 - p) * 2^50. */
export function classOffset(priority: number): number {
  return (4 - priority) * CLASS_SPAN
}

/** K's member for a parked waiter (lua `string.format('%s %016.0f %s', f, score + 3 * 2^50, tok)`). */
/** A start tag's place in its class: its step of TIE_SPAN units, then arrival (ticket mod TIE_SPAN). */
function tieStep(start: number, ticket: number): number {
  return start - (start % TIE_SPAN) + (ticket % TIE_SPAN)
}

/** The score of a waiter of a class out of tag range: arrival order, the class kept. */
function saturatedScore(d: TokenDiscipline, ticket: number): number {
  return classOffset(d.priority) + SATURATED_BASE + (ticket % SATURATED_SPAN)
}

export function parkedMember(flow: string, score: number, token: string): string {
  return `${flow} ${String(score + PARK_SHIFT).padStart(16, '0')} ${token}`
}

export class FairQueue {
  readonly order = new SortedSet()
  readonly parked = new SortedSet()
  /** M k:<tok>: a parked waiter's score in Q, to put it back. */
  readonly parkedScores = new Map<string, number>()
  readonly tags = new SortedSet()
  readonly v: number[] = new Array<number>(CLASSES).fill(0)
  readonly n: number[] = new Array<number>(CLASSES).fill(0)
  readonly x: number[] = new Array<number>(CLASSES).fill(0)
  readonly sat: boolean[] = new Array<boolean>(CLASSES).fill(false)
  readonly q = new Map<string, number>()
  readonly h = new Map<string, number>()
  readonly k = new Map<string, number>()
  /** Waiters in `order` or `parked` without a discipline (a process without `overload`). */
  plain = 0
  /** Classes granted from in the current admission (bit p), pruned at its end. */
  private granted = 0

  /** The score a disciplined waiter would get if it joined now (enqueue() without its effects): what a
   * full queue compares with its tail. */
  wouldScore(d: TokenDiscipline, ticket: number): number {
    const start = this.startOf(d)
    return this.saturates(d, start)
      ? saturatedScore(d, ticket)
      : classOffset(d.priority) + tieStep(start, ticket)
  }

  /** A flow's start tag in its class: S = max(V, the flow's last finish F). */
  private startOf(d: TokenDiscipline): number {
    const offset = classOffset(d.priority)
    const last = this.tags.score(`${d.priority}:${d.flow}`)
    return Math.max(this.v[d.priority] as number, last === undefined ? 0 : last - offset)
  }

  /** The class is (or with this request would go) out of tag range: arrival order from now on. */
  private saturates(d: TokenDiscipline, start: number): boolean {
    return (this.sat[d.priority] as boolean) || start + tagCost(d.weight, d.flowWeight) >= SATURATED_BASE
  }

  /** A waiter joins `order`: its start tag S = max(V, the flow's last finish F), the flow's finish
   * becomes S + cost. A plain waiter (no discipline) is scored by its ticket. Returns the score. */
  enqueue(token: string, d: TokenDiscipline | undefined, ticket: number): number {
    if (!d) {
      this.plain++
      this.order.add(token, ticket)
      return ticket
    }
    const p = d.priority
    const offset = classOffset(p)
    const key = `${p}:${d.flow}`
    const start = this.startOf(d)
    let score: number
    if (this.saturates(d, start)) {
      // Out of tag range: arrival order, class kept, until the class empties (then rebase).
      this.sat[p] = true
      score = saturatedScore(d, ticket)
    } else {
      this.tags.add(key, offset + start + tagCost(d.weight, d.flowWeight))
      score = offset + tieStep(start, ticket)
    }
    this.order.add(token, score)
    this.n[p] = (this.n[p] as number) + 1
    this.q.set(key, (this.q.get(key) ?? 0) + 1)
    return score
  }

  /** A waiter leaves `order` with a permit: V moves up to its score (less the offset); its counts go
   * down; a capped flow's held permits go up. The flow keeps its finish tag (a flow re-entering at V
   * after every admission would pass every backlogged flow). */
  grant(token: string, d: TokenDiscipline | undefined, score: number): void {
    this.order.delete(token)
    if (!d) {
      this.plain--
      return
    }
    const p = d.priority
    this.v[p] = Math.max(this.v[p] as number, score - classOffset(p))
    this.count(p, `${p}:${d.flow}`)
    this.granted |= 1 << p
    this.hold(d, d.weight)
  }

  /** A waiter leaves without a permit (gave up, died, evicted): its counts go down; the flow's last
   * waiter of the class leaving refunds the flow's finish tag, so a flow whose waiters all timed out
   * starts again at V instead of paying for work it never got. */
  leave(token: string, d: TokenDiscipline | undefined): void {
    const score = this.parkedScores.get(token)
    if (score !== undefined && d) {
      this.parkedScores.delete(token)
      this.parked.delete(parkedMember(d.flow, score, token))
      this.addTo(this.k, d.flow, -1)
    } else if (!this.order.delete(token)) return
    if (!d) {
      this.plain--
      return
    }
    const key = `${d.priority}:${d.flow}`
    if (this.count(d.priority, key) === 0) this.tags.delete(key)
  }

  /** Whether a capped flow may take `weight` permits at once: under its cap, nobody of it parked. */
  canTake(d: TokenDiscipline | undefined, weight: number): boolean {
    if (!d || d.flowMax === 0) return true
    return (this.h.get(d.flow) ?? 0) + weight <= d.flowMax && (this.k.get(d.flow) ?? 0) === 0
  }

  /** Whether the head `d` must park: its flow would go past its cap. */
  mustPark(d: TokenDiscipline): boolean {
    return d.flowMax > 0 && (this.h.get(d.flow) ?? 0) + d.weight > d.flowMax
  }

  /** A capped flow's head moves from `order` to `parked`, keeping its score. */
  park(token: string, d: TokenDiscipline, score: number): void {
    this.order.delete(token)
    this.parked.add(parkedMember(d.flow, score, token), 0)
    this.parkedScores.set(token, score)
    this.addTo(this.k, d.flow, 1)
  }

  /** Up to max - held of a capped flow's oldest parked waiters go back into `order`. Returns them. */
  unpark(flow: string, max: number): string[] {
    const room = max - (this.h.get(flow) ?? 0)
    if (room <= 0 || !this.k.has(flow)) return []
    const members = this.parked.withPrefix(`${flow} `, room)
    const tokens: string[] = []
    for (const member of members) {
      const token = member.slice(member.indexOf(' ', flow.length + 1) + 1)
      const score = this.parkedScores.get(token) as number
      this.parked.delete(member)
      this.parkedScores.delete(token)
      this.addTo(this.k, flow, -1)
      this.order.add(token, score)
      tokens.push(token)
    }
    return tokens
  }

  /** Nothing is held any more: up to HEAL_MOST parked waiters go back into `order` (K's order: by
   * flow, then score), and admission parks again those still over their cap (lua fq.heal(), run by
   * every fair call that finds H gone). */
  heal(): void {
    for (const member of this.parked.first(HEAL_MOST)) {
      const flow = member.slice(0, member.indexOf(' '))
      const token = member.slice(member.indexOf(' ', flow.length + 1) + 1)
      const score = this.parkedScores.get(token) as number
      this.parked.delete(member)
      this.parkedScores.delete(token)
      this.addTo(this.k, flow, -1)
      this.order.add(token, score)
    }
  }

  /** A capped flow takes `weight` permits (a grant from the queue or at once). */
  hold(d: TokenDiscipline, weight: number): void {
    if (d.flowMax > 0) this.addTo(this.h, d.flow, weight)
  }

  /** A capped flow's holder gave back `weight` permits (release, lease ran out): its oldest parked
   * waiters go back into the queue, as many as its cap now has room for. */
  free(d: TokenDiscipline, weight: number): void {
    if (d.flowMax === 0) return
    this.addTo(this.h, d.flow, -weight)
    this.unpark(d.flow, d.flowMax)
  }

  /** 0-based place of a waiter: its rank in `order`; a parked one, the waiters at or before its score. */
  position(token: string): number {
    const parked = this.parkedScores.get(token)
    return parked === undefined ? this.order.rank(token) : this.order.countUpTo(parked)
  }

  /** End of an admission: each class granted from prunes finish tags at or below its V (nobody's
   * start tag reads them any more), PRUNE_PER_GRANT at most; then quiescent classes rebase. */
  endAdmission(): void {
    for (let p = 0; p < CLASSES; p++) {
      if ((this.granted & (1 << p)) === 0) continue
      const offset = classOffset(p)
      for (const key of this.tags.rangeByScore(offset, offset + (this.v[p] as number), PRUNE_PER_GRANT))
        this.tags.delete(key)
    }
    this.granted = 0
    this.rebase()
  }

  /** V only grows; a class with no waiter and V >= REBASE_AT brings it back to 0: V jumps to the
   * class's largest finish tag (every tag is then prunable), REBASE_PRUNE tags go per call, and once
   * none is left V is 0. A waiter arriving meanwhile starts at the large V: order stays correct. */
  rebase(): void {
    for (let p = 0; p < CLASSES; p++) {
      if ((this.n[p] as number) > 0 || (this.v[p] as number) < REBASE_AT) continue
      const offset = classOffset(p)
      const largest = this.tags.lastUpTo(offset + CLASS_SPAN - 1)
      if (largest && largest[1] >= offset) {
        this.v[p] = Math.max(this.v[p] as number, largest[1] - offset)
        for (const key of this.tags.rangeByScore(offset, offset + (this.v[p] as number), REBASE_PRUNE))
          this.tags.delete(key)
      }
      const left = this.tags.lastUpTo(offset + CLASS_SPAN - 1)
      if (!left || left[1] < offset) this.v[p] = 0
    }
  }

  /** One fewer waiter of class p and of flow key `key`; returns the flow's count left. A class that
   * empties leaves arrival order (saturation). */
  private count(p: number, key: string): number {
    this.n[p] = (this.n[p] as number) - 1
    if (this.n[p] === 0) this.sat[p] = false
    return this.addTo(this.q, key, -1)
  }

  private addTo(map: Map<string, number>, key: string, by: number): number {
    const value = (map.get(key) ?? 0) + by
    if (value === 0) map.delete(key)
    else map.set(key, value)
    return value
  }
}
