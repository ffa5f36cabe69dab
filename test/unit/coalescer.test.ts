// The coalescer's rule, without Redis: which calls go straight, which are merged, and that every call of
// a name is sent in the order it was made.
import { describe, expect, it } from 'vitest'
import { type Call, Coalescer, MAX_BATCH } from '../../src/core/redis/coalescer.js'

interface TestCall extends Call {
  id: string
}

function harness() {
  const sent: string[][] = []
  let endOfTurn: (() => void) | undefined
  const coalescer = new Coalescer<TestCall>(
    (calls) => sent.push(calls.map((call) => call.id)),
    (fn) => {
      endOfTurn = fn
    },
  )
  const call = (id: string, name = 'n', kind: string | undefined = 'acquire', token = id): TestCall => ({
    id,
    name,
    kind,
    token,
  })
  return {
    sent,
    coalescer,
    submit: (...calls: TestCall[]) => calls.forEach((c) => coalescer.submit(c)),
    call,
    endTurn: () => {
      const fn = endOfTurn
      endOfTurn = undefined
      fn?.()
    },
    pendingTurn: () => endOfTurn !== undefined,
  }
}

describe('G1 G12: coalescer', () => {
  it('sends a lone call at once, with no end-of-turn work', () => {
    const h = harness()
    h.submit(h.call('a'))
    expect(h.sent).toEqual([['a']])
    expect(h.pendingTurn()).toBe(false)
  })

  it('sends the first call at once and merges the rest of the turn into one call', () => {
    const h = harness()
    h.submit(h.call('a'), h.call('b'), h.call('c'), h.call('d'))
    // a: nothing in flight. b, c, d: a is in flight, so they wait for the end of the turn.
    expect(h.sent).toEqual([['a']])
    h.endTurn()
    expect(h.sent).toEqual([['a'], ['b', 'c', 'd']])
  })

  it('while a call of the name is in flight, every call of a turn waits for its end: one call per turn', () => {
    const h = harness()
    h.submit(h.call('a'))
    h.endTurn()
    h.submit(h.call('b'), h.call('c'), h.call('d'))
    expect(h.sent).toEqual([['a']])
    h.endTurn()
    expect(h.sent).toEqual([['a'], ['b', 'c', 'd']])
    h.submit(h.call('e'), h.call('f'))
    h.endTurn()
    expect(h.sent).toEqual([['a'], ['b', 'c', 'd'], ['e', 'f']])
    expect(h.coalescer.pending('n')).toBe(3)
  })

  it('after the replies landed, a call goes straight again', () => {
    const h = harness()
    h.submit(h.call('a'))
    h.coalescer.landed('n')
    h.submit(h.call('b'))
    expect(h.sent).toEqual([['a'], ['b']])
    expect(h.pendingTurn()).toBe(false)
  })

  it('keeps the call order of a name across kinds: only consecutive calls of one kind merge', () => {
    const h = harness()
    h.submit(h.call('a'))
    h.submit(
      h.call('c1', 'n', 'acquire'),
      h.call('c2', 'n', 'acquire'),
      h.call('r1', 'n', 'release'),
      { ...h.call('x'), kind: undefined }, // a renew: never merged
      h.call('c3', 'n', 'acquire'),
      h.call('c4', 'n', 'acquire'),
    )
    h.endTurn()
    expect(h.sent.slice(1)).toEqual([['c1', 'c2'], ['r1'], ['x'], ['c3', 'c4']])
  })

  it('never merges calls without a kind, not even with each other', () => {
    const h = harness()
    h.submit(h.call('a'))
    h.submit({ ...h.call('r1'), kind: undefined }, { ...h.call('r2'), kind: undefined })
    h.endTurn()
    expect(h.sent.slice(1)).toEqual([['r1'], ['r2']])
  })

  it('never repeats a token in one merged call (a release twice must find it gone)', () => {
    const h = harness()
    h.submit(h.call('a'))
    h.submit(
      h.call('r1', 'n', 'release', 't'),
      h.call('r2', 'n', 'release', 't'),
      h.call('r3', 'n', 'release', 'u'),
    )
    h.endTurn()
    expect(h.sent.slice(1)).toEqual([['r1'], ['r2', 'r3']])
  })

  it(`merges at most ${MAX_BATCH} calls into one`, () => {
    const h = harness()
    h.submit(h.call('a'))
    const many = Array.from({ length: MAX_BATCH + 3 }, (_, i) => h.call(`c${i}`))
    h.submit(...many)
    h.endTurn()
    expect(h.sent.slice(1).map((batch) => batch.length)).toEqual([MAX_BATCH, 3])
  })

  it('batches each name on its own', () => {
    const h = harness()
    h.submit(h.call('a', 'x'), h.call('b', 'y'), h.call('c', 'x'), h.call('d', 'x'), h.call('e', 'y'))
    expect(h.sent).toEqual([['a'], ['b']])
    h.endTurn()
    expect(h.sent.slice(2)).toEqual([['c', 'd'], ['e']])
    expect(h.coalescer.pending('x')).toBe(2)
    expect(h.coalescer.pending('y')).toBe(2)
  })
})
