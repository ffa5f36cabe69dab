import { describe, expect, it } from 'vitest'
import { encodeName, keySpace, MAX_ENCODED_NAME } from '../../src/core/keys.js'
import {
  createMemoryStore,
  createMutex,
  createReadWriteLock,
  createReentrantMutex,
  createSemaphore,
  type Lease,
} from '../../src/index.js'

/** The hash tag Redis Cluster uses: between the first '{' and the next '}'. */
function hashTag(key: string): string {
  const open = key.indexOf('{')
  const close = key.indexOf('}', open + 1)
  return key.slice(open + 1, close)
}

describe('G8: encodeName', () => {
  it('keeps ordinary names readable', () => {
    expect(encodeName('api/export')).toBe('api/export')
    expect(encodeName('tenant-42:eu')).toBe('tenant-42:eu')
    expect(encodeName('ü🚦')).toBe('ü🚦')
  })

  it.each(['{', '}', 'a{b}c', '%', '\r\n', '\u0000', '\u007f', ' ', '\t'])(
    'leaves no raw hazard in %j',
    (name) => {
      const encoded = encodeName(name)
      expect(encoded).not.toMatch(/[{}\s\p{Cc}]/u)
      expect(decodeURIComponent(encoded)).toBe(name)
    },
  )

  it('keeps distinct names distinct, including ones that look encoded', () => {
    const names = ['{', '%7B', '%257B', 'a b', 'a%20b', 'a+b']
    expect(new Set(names.map(encodeName)).size).toBe(names.length)
  })

  it('replaces long names by a fixed-size digest', () => {
    const long = 'x'.repeat(64 * 1024)
    const encoded = encodeName(long)
    expect(encoded.length).toBeLessThanOrEqual(MAX_ENCODED_NAME)
    expect(encoded).toMatch(/^#[\w-]{43}$/)
    expect(encodeName(long)).toBe(encoded)
    expect(encodeName(`${long}y`)).not.toBe(encoded)
  })
})

describe('G8: keySpace', () => {
  it('puts every key and the channel of a name under one hash tag', () => {
    for (const name of ['plain', '{evil}', 'a}b{c', '}{', 'x'.repeat(5000)]) {
      const space = keySpace('tollgate', 'sem', name)
      const tags = new Set([space.key('h'), space.key('q'), space.key('w'), space.key('m')].map(hashTag))
      expect(tags.size).toBe(1)
      expect([...tags][0]).toBe(`sem:${encodeName(name)}`)
      expect(space.channel.startsWith(space.base)).toBe(true)
    }
  })

  it('separates kinds and prefixes', () => {
    expect(keySpace('tollgate', 'mutex', 'a').base).not.toBe(keySpace('tollgate', 'sem', 'a').base)
    expect(keySpace('p1', 'mutex', 'a').base).not.toBe(keySpace('p2', 'mutex', 'a').base)
  })
})

describe('the keys of each kind of lock (what must not change across versions)', () => {
  it('a name keeps its keys: processes of this version and the last share every lock but the reentrant mutex, which now shares the mutex’s', async () => {
    const store = createMemoryStore()
    const lock = createReadWriteLock(store, 'orders-rw')
    const keyOf = async (take: () => Promise<Lease>) => {
      const lease = await take()
      await lease.release()
      return lease.key
    }
    expect(await keyOf(() => createMutex(store, 'orders').acquire())).toBe('tollgate:{mutex:orders}')
    // Was {rmutex:orders}: one name is one lock (docs/api.md, "Upgrading").
    expect(await keyOf(() => createReentrantMutex(store, 'orders', { owner: 'job' }).acquire())).toBe(
      'tollgate:{mutex:orders}',
    )
    expect(await keyOf(() => createSemaphore(store, 'orders-sem', { permits: 1 }).acquire())).toBe(
      'tollgate:{sem:orders-sem}',
    )
    expect(await keyOf(() => lock.write.acquire())).toBe('tollgate:{rw:orders-rw}')
    await store.close()
  })
})
