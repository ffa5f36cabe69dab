// Contract of the lone holder (lib/permits.lua): a plain acquire of a name nobody holds or waits for
// keeps its hold in F alone ("<fence> <expiresAt> <token>", PXAT expiresAt), and every other call
// sees it as a holder: it moves into H the moment anything else happens on the name, and no script
// may grant past it, forget it, or hand its permit on. Each case starts from a lone holder.
import { describe, expect, it } from 'vitest'
import { grantLine, PermitName, serverClock, sleep, type Granted } from './support.js'

/** A name whose only holder is `tok`, kept in F. */
async function loneName(tok = 'a', ttl = 10_000): Promise<{ n: PermitName; lease: Granted }> {
  const n = new PermitName()
  const [, row] = await n.acquire(tok, { ttl })
  const lease = row as Granted
  expect(await n.lone()).toEqual({ fence: lease[1], expiresAt: lease[2], token: tok })
  expect(await n.parts()).toEqual(['f'])
  return { n, lease }
}

describe('permit scripts with a lone holder', () => {
  it('G1 G5: a second acquire queues behind it; its release hands the permit on, with a larger fence', async () => {
    const { n, lease } = await loneName()
    const [, b] = await n.acquire('b', { waiterTtl: 5_000 })
    expect(b).toEqual([0, 0, lease[2]])
    expect(await n.zset('h')).toEqual({ a: lease[2] }) // moved into H
    expect(await n.lone()).toBeUndefined()
    expect(await n.redis.get(n.key.f)).toBe(String(lease[1]))
    const listener = await n.listen()
    try {
      const [message, code] = await n.release('a')
      expect(code).toBe(1)
      const grant = grantLine(message)
      expect(grant.token).toBe('b')
      expect(grant.fence).toBeGreaterThan(lease[1])
      expect(await listener.next(1)).toEqual([message])
    } finally {
      await listener.close()
    }
    expect(Object.keys(await n.holders())).toEqual(['b'])
  })

  it('G1: no batch, weighted or reentrant acquire is granted past it', async () => {
    const { n, lease } = await loneName()
    const [, ...rows] = await n.acquire(['x', 'y', 'z'], { mode: 0 })
    expect(rows).toEqual([
      [0, -1, lease[2]],
      [0, -1, lease[2]],
      [0, -1, lease[2]],
    ])
    const w = await loneName()
    const [, heavy] = await w.n.acquire('h*2', { permits: 2, mode: 0 })
    expect(heavy).toEqual([0, -1, w.lease[2]])
    const o = await loneName()
    const [, owner] = await o.n.acquire('o', { op: 'o1', mode: 0 })
    expect(owner).toEqual([0, -1, o.lease[2]])
    for (const name of [n, w.n, o.n]) expect((await name.inspect())[0]).toBe(1)
  })

  it('G1: with room for more, a second holder gets its own permit and the lone holder keeps its lease', async () => {
    const { n, lease } = await loneName()
    const [, b] = await n.acquire('b', { permits: 2 })
    expect((b as Granted)[0]).toBe(1)
    expect((b as Granted)[1]).toBeGreaterThan(lease[1])
    expect((b as Granted)[3]).toBe(2)
    expect(await n.holders()).toEqual({ a: lease[2], b: (b as Granted)[2] })
    const [, c] = await n.acquire('c', { permits: 2, mode: 0 })
    expect(c![0]).toBe(0)
  })

  it('G1 G2: a re-check of a wait that is gone, and a limit change, leave it holding', async () => {
    const { n, lease } = await loneName()
    const before = await n.snapshot()
    const [, , row] = await n.recheck(1, 5_000, ['gone', ''])
    expect(row).toEqual([-1])
    expect(await n.snapshot()).toEqual(before)
    expect(await n.setLimit(3)).toEqual([1, expect.any(Number), 1])
    expect(await n.setLimit(0)).toEqual([1, expect.any(Number), 1])
    expect(await n.lone()).toEqual({ fence: lease[1], expiresAt: lease[2], token: 'a' })
    const [, b] = await n.acquire('b', { mode: 0 })
    expect(b![0]).toBe(0)
  })

  it('inspect counts it', async () => {
    const { n } = await loneName()
    expect(await n.inspect()).toEqual([1, 0, 0, expect.any(Number), 0])
  })

  it('G3: only its own token gives it back, once; a stranger, a batch or a reentrant acquisition frees nothing else', async () => {
    const { n } = await loneName()
    const before = await n.snapshot()
    expect(await n.release('stranger')).toEqual(['', 0])
    expect(await n.release('a', 1, 'op-1')).toEqual(['', 0]) // an acquisition id: never a lone holder
    expect(await n.snapshot()).toEqual(before)
    expect(await n.release(['x', 'a', 'y'])).toEqual(['', 0, 1, 0])
    expect(await n.parts()).toEqual([]) // the fence is behind the clock: nothing left
    expect(await n.release('a')).toEqual(['', 0]) // resent: nothing more
  })

  it('G2 G7: once its lease ran out the name is free, and the next fence is larger', async () => {
    const { n, lease } = await loneName('a', 100)
    await sleep(150)
    expect((await n.inspect())[0]).toBe(0)
    expect(await n.renew(10_000, ['a', ''])).toEqual([expect.any(Number), 0])
    const [, b] = await n.acquire('b')
    expect((b as Granted)[1]).toBeGreaterThan(lease[1])
  })

  it('G2 G3: a lease that ran out while its key was not yet expired by Redis gives back nothing and is no holder', async () => {
    const { n, lease } = await loneName()
    // As Redis may still serve a key in the millisecond its expiry passes: the value says it ran out.
    const { ms } = await serverClock()
    await n.redis.set(n.key.f, `${lease[1]} ${ms - 1} a`, 'PXAT', ms + 60_000)
    expect(await n.release('a')).toEqual(['', 0])
    expect(await n.renew(10_000, ['a', ''])).toEqual([expect.any(Number), 0])
    expect((await n.inspect())[0]).toBe(0)
    const [, b] = await n.acquire('b')
    expect((b as Granted)[0]).toBe(1)
    expect((b as Granted)[1]).toBeGreaterThan(lease[1])
    expect(Object.keys(await n.holders())).toEqual(['b'])
  })

  it('G4 G12: through an acquisition id, it holds nothing, whatever order a renewal batch names it in', async () => {
    const { n } = await loneName('a', 1_000)
    const [now, viaOp, plain] = await n.renew(10_000, ['a', 'x'], ['a', ''])
    expect([viaOp, plain]).toEqual([0, now! + 10_000])
    const [, plain2, viaOp2] = await n.renew(20_000, ['a', ''], ['a', 'x'])
    expect(plain2).toBeGreaterThan(0)
    expect(viaOp2).toBe(0)
  })

  it('G12: a re-check reports it granted, with the fence it was granted with (as a grant kept in H)', async () => {
    const { n, lease } = await loneName()
    const [, , row, viaOp] = await n.recheck(1, 2_000, ['a', ''], ['a', 'x'])
    expect(row).toEqual([1, lease[1], lease[2]])
    expect(viaOp).toEqual([-1])
    expect(await n.lone()).toEqual({ fence: lease[1], expiresAt: lease[2], token: 'a' })
  })

  it('G4: a renewal extends it in F, never shortens it, and renews nothing for another token', async () => {
    const { n, lease } = await loneName('a', 1_000)
    const [now, exp, other] = await n.renew(10_000, ['a', ''], ['b', ''])
    expect(exp).toBe(now! + 10_000)
    expect(other).toBe(0)
    expect(await n.lone()).toEqual({ fence: lease[1], expiresAt: exp, token: 'a' })
    expect(await n.expireAt('f')).toBe(exp)
    const [, shorter] = await n.renew(500, ['a', ''])
    expect(shorter).toBe(exp)
  })
})
