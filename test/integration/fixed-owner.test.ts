// Fixed owners across processes, with the network cutting connections under them: three processes
// share a few owner names (as job ids are shared), acquire sometimes twice at once for one owner, and
// an independent checker (another key on the standalone server) counts who is inside. Also the
// frozen waiter: a process stopped (SIGSTOP) while the lock was handed to it.
import { describe, expect, it } from 'vitest'
import { createMutex, createReentrantMutex } from '../../src/index.js'
import type { OwnerContendResult } from '../fixtures/owner-contend.js'
import { type ChildHandle, spawnReadyChild } from '../helpers/child.js'
import { eventually, REDIS_KINDS, sleep, storeFor } from '../helpers/contract.js'
import { uniquePrefix } from '../helpers/redis.js'

const OWNER_WORKER = new URL('../fixtures/owner-worker.ts', import.meta.url)
const LOCK_WORKER = new URL('../fixtures/lock-worker.ts', import.meta.url)

for (const kind of REDIS_KINDS) {
  describe(`fixed owners across 3 processes [${kind}]`, () => {
    for (const family of ['rmutex', 'rw'] as const) {
      it(`G1 G7 G12: no two owners overlap (${family}) while connections are cut and scripts resent`, async () => {
        const prefix = uniquePrefix().slice(0, -1)
        const workers = await Promise.all([0, 1, 2].map(() => spawnReadyChild(OWNER_WORKER)))
        const request = {
          type: 'contend',
          kind,
          prefix,
          name: 'shared',
          family,
          owners: ['job-a', 'job-b', 'job-c', 'job-d'],
          contenders: 4,
          durationMs: 3000,
          checkerKey: `${prefix}:checker`,
          faults: true,
        }
        for (const worker of workers) worker.send(request)
        const results = (await Promise.all(
          workers.map((worker: ChildHandle) => worker.waitFor('contended', 60_000)),
        )) as unknown as (OwnerContendResult & { cuts: number })[]
        expect(results.map((r) => r.violations)).toEqual([0, 0, 0])
        expect(results.map((r) => r.fenceRegressions)).toEqual([0, 0, 0])
        // The run did something: acquisitions in every process, and cuts that forced resends.
        for (const r of results) {
          expect(r.acquisitions).toBeGreaterThan(10)
          expect(r.cuts).toBeGreaterThan(3)
        }
      }, 60_000)
    }

    it('G2: an acquisition whose process died while sharing a fixed owner holds the lock until its TTL runs out, as documented', async () => {
      const prefix = uniquePrefix().slice(0, -1)
      const { store } = storeFor(kind, prefix)
      const ttlMs = 1500
      try {
        const child = await spawnReadyChild(LOCK_WORKER)
        child.send({ type: 'acquire', kind, prefix, name: 'job-lock', id: 'c', owner: 'job-1', ttlMs })
        await child.waitFor('acquired')
        const mine = await createReentrantMutex(store, 'job-lock', { owner: 'job-1', ttlMs }).acquire()
        const other = createReentrantMutex(store, 'job-lock', { owner: 'job-2' })
        const waiting = other.acquire({ timeoutMs: 10_000 })
        child.kill('SIGKILL')
        await child.exited
        await sleep(ttlMs) // the owner's hold lives on through this process's renewals
        expect(await other.tryAcquire()).toBeUndefined()
        const releasedAt = performance.now()
        await mine.release()
        const lease = await waiting
        // The dead acquisition holds the lock until the shared hold's TTL runs out: after the last
        // renewal (at most a third of the TTL before the release), not before.
        const waited = performance.now() - releasedAt
        expect(waited).toBeGreaterThan(ttlMs / 3)
        expect(waited).toBeLessThan(ttlMs + 400)
        await lease.release()
      } finally {
        await store.close()
      }
    })

    it('G2 G4: a waiter stopped (SIGSTOP) while the lock was handed to it resumes with a live lease', async () => {
      const prefix = uniquePrefix().slice(0, -1)
      const { store } = storeFor(kind, prefix)
      try {
        const mutex = createMutex(store, 'frozen')
        const held = await mutex.acquire()
        const child = await spawnReadyChild(LOCK_WORKER)
        child.send({ type: 'acquire', kind, prefix, name: 'frozen', id: 'w', waiterTtlMs: 300 })
        await child.waitFor('acquiring')
        await eventually(async () => (await createMutex(store, 'frozen').tryAcquire()) === undefined)
        await sleep(100) // queued
        child.kill('SIGSTOP')
        // Handed over with the waiter's short lease (waiterTtlMs = 300 ms), which runs out while the
        // waiter is stopped.
        await held.release()
        await sleep(1000)
        child.kill('SIGCONT')
        const acquired = await child.waitFor('acquired', 10_000)
        expect(acquired.aborted).toBe(false)
        expect(acquired.liveForMs).toBeGreaterThan(0)
      } finally {
        await store.close()
      }
    })
  })
}
