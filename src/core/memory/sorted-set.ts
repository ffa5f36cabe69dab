// The memory twin of a Redis sorted set (ZSET), for the fair queue (fair-queue.ts): members ordered by
// (score, member), members compared by UTF-16 code unit, which is Redis's byte order for the ASCII
// tokens and members the permit scripts store. A skip list with spans, as Redis's own (t_zset.c), so
// insert, delete, rank and seeks cost O(log n) expected, and a member's score is one Map look-up.

const MAX_LEVEL = 32
/** Chance that a node also reaches the next level (Redis's ZSKIPLIST_P). */
const LEVEL_UP = 0.25

class SkipNode {
  readonly next: (SkipNode | null)[]
  /** Nodes stepped over by next[i] (1 for the neighbour): what rank() adds up. */
  readonly span: number[]
  prev: SkipNode | null = null

  constructor(
    readonly member: string,
    readonly score: number,
    level: number,
  ) {
    this.next = new Array<SkipNode | null>(level).fill(null)
    this.span = new Array<number>(level).fill(0)
  }
}

/** Whether `node` sorts before (score, member). */
function before(node: SkipNode, score: number, member: string): boolean {
  return node.score < score || (node.score === score && node.member < member)
}

function randomLevel(): number {
  let level = 1
  while (level < MAX_LEVEL && Math.random() < LEVEL_UP) level++
  return level
}

export class SortedSet {
  private readonly sentinel = new SkipNode('', Number.NEGATIVE_INFINITY, MAX_LEVEL)
  private tail: SkipNode | null = null
  private level = 1
  private readonly scores = new Map<string, number>()

  get size(): number {
    return this.scores.size
  }

  score(member: string): number | undefined {
    return this.scores.get(member)
  }

  has(member: string): boolean {
    return this.scores.has(member)
  }

  /** ZADD: insert `member`, or move it to `score`. */
  add(member: string, score: number): void {
    const old = this.scores.get(member)
    if (old === score) return
    if (old !== undefined) this.unlink(member, old)
    const update = new Array<SkipNode>(MAX_LEVEL)
    const rank = new Array<number>(MAX_LEVEL)
    let x = this.sentinel
    for (let i = this.level - 1; i >= 0; i--) {
      rank[i] = i === this.level - 1 ? 0 : (rank[i + 1] as number)
      for (let n = x.next[i]; n && before(n, score, member); n = x.next[i]) {
        rank[i] = (rank[i] as number) + (x.span[i] as number)
        x = n
      }
      update[i] = x
    }
    const length = this.scores.size - (old === undefined ? 0 : 1)
    const level = randomLevel()
    for (let i = this.level; i < level; i++) {
      rank[i] = 0
      update[i] = this.sentinel
      this.sentinel.span[i] = length
    }
    this.level = Math.max(this.level, level)
    const node = new SkipNode(member, score, level)
    const at = rank[0] as number
    for (let i = 0; i < level; i++) {
      const u = update[i] as SkipNode
      node.next[i] = u.next[i] as SkipNode | null
      u.next[i] = node
      node.span[i] = (u.span[i] as number) - (at - (rank[i] as number))
      u.span[i] = at - (rank[i] as number) + 1
    }
    for (let i = level; i < this.level; i++) {
      const u = update[i] as SkipNode
      u.span[i] = (u.span[i] as number) + 1
    }
    node.prev = update[0] === this.sentinel ? null : (update[0] as SkipNode)
    const after = node.next[0]
    if (after) after.prev = node
    else this.tail = node
    this.scores.set(member, score)
  }

  /** ZREM: whether `member` was there. */
  delete(member: string): boolean {
    const score = this.scores.get(member)
    if (score === undefined) return false
    this.unlink(member, score)
    this.scores.delete(member)
    return true
  }

  /** ZRANK: 0-based place of `member`, -1 when absent. */
  rank(member: string): number {
    const score = this.scores.get(member)
    if (score === undefined) return -1
    let rank = 0
    let x = this.sentinel
    for (let i = this.level - 1; i >= 0; i--) {
      for (
        let n = x.next[i];
        n && (n.score < score || (n.score === score && n.member <= member));
        n = x.next[i]
      ) {
        rank += x.span[i] as number
        x = n
      }
      if (x !== this.sentinel && x.member === member) return rank - 1
    }
    return -1
  }

  /** ZCOUNT -inf score: how many members have a score of at most `score`. */
  countUpTo(score: number): number {
    let count = 0
    let x = this.sentinel
    for (let i = this.level - 1; i >= 0; i--) {
      for (let n = x.next[i]; n && n.score <= score; n = x.next[i]) {
        count += x.span[i] as number
        x = n
      }
    }
    return count
  }

  /** ZRANGE 0 k-1: the first `k` members. */
  first(k: number): string[] {
    const out: string[] = []
    for (let n = this.sentinel.next[0] ?? null; n && out.length < k; n = n.next[0] ?? null) out.push(n.member)
    return out
  }

  /** ZRANGE 0 0 WITHSCORES: the first member and its score. */
  head(): [member: string, score: number] | undefined {
    const first = this.sentinel.next[0]
    return first ? [first.member, first.score] : undefined
  }

  /** ZRANGE -1 -1 WITHSCORES: the last member and its score. */
  last(): [member: string, score: number] | undefined {
    return this.tail ? [this.tail.member, this.tail.score] : undefined
  }

  /** Members and scores in order (the set must not change while this is iterated). */
  *entries(): Generator<[member: string, score: number]> {
    for (let n = this.sentinel.next[0] ?? null; n; n = n.next[0] ?? null) yield [n.member, n.score]
  }

  /** ZRANGEBYSCORE min max LIMIT 0 limit (both ends inclusive). */
  rangeByScore(min: number, max: number, limit: number): string[] {
    const out: string[] = []
    for (let n = this.seek(min, ''); n && n.score <= max && out.length < limit; n = n.next[0] ?? null)
      out.push(n.member)
    return out
  }

  /** ZREVRANGEBYSCORE max -inf LIMIT 0 1: the last member with a score of at most `max`. */
  lastUpTo(max: number): [member: string, score: number] | undefined {
    let x = this.sentinel
    for (let i = this.level - 1; i >= 0; i--)
      for (let n = x.next[i]; n && n.score <= max; n = x.next[i]) x = n
    return x === this.sentinel ? undefined : [x.member, x.score]
  }

  /** ZRANGEBYLEX "[prefix" "(prefix\uffff" LIMIT 0 limit among members of score `score` (a set whose
   * members all share one score, as Redis's lex ranges require). */
  withPrefix(prefix: string, limit: number, score = 0): string[] {
    const out: string[] = []
    for (
      let n = this.seek(score, prefix);
      n && n.score === score && n.member.startsWith(prefix) && out.length < limit;
      n = n.next[0] ?? null
    )
      out.push(n.member)
    return out
  }

  /** The first node at or after (score, member). */
  private seek(score: number, member: string): SkipNode | null {
    let x = this.sentinel
    for (let i = this.level - 1; i >= 0; i--)
      for (let n = x.next[i]; n && before(n, score, member); n = x.next[i]) x = n
    return x.next[0] ?? null
  }

  private unlink(member: string, score: number): void {
    const update = new Array<SkipNode>(this.level)
    let x = this.sentinel
    for (let i = this.level - 1; i >= 0; i--) {
      for (let n = x.next[i]; n && before(n, score, member); n = x.next[i]) x = n
      update[i] = x
    }
    const node = x.next[0]
    if (!node || node.member !== member) return
    for (let i = 0; i < this.level; i++) {
      const u = update[i] as SkipNode
      if (u.next[i] === node) {
        u.span[i] = (u.span[i] as number) + (node.span[i] as number) - 1
        u.next[i] = node.next[i] as SkipNode | null
      } else u.span[i] = (u.span[i] as number) - 1
    }
    const after = node.next[0]
    if (after) after.prev = node.prev
    else this.tail = node.prev
    while (this.level > 1 && this.sentinel.next[this.level - 1] === null) this.level--
  }
}
