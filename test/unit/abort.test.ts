// AbortFlag, the per-request cancellation of the middleware and the gateway: what a wait relies on
// an AbortSignal for, without an EventTarget per request.
import { describe, expect, it } from 'vitest'
import { AbortFlag, isAbortSignalLike } from '../../src/core/abort.js'
import { createMemoryStore, createSemaphore } from '../../src/index.js'

describe('AbortFlag', () => {
  it('calls each listener once, on the first abort, and not after removal or when added late', () => {
    const flag = new AbortFlag()
    const calls: string[] = []
    const a = () => calls.push('a')
    const b = () => calls.push('b')
    flag.addEventListener('abort', a)
    flag.addEventListener('abort', b)
    flag.removeEventListener('abort', b)
    flag.abort('first')
    flag.abort('second')
    flag.addEventListener('abort', () => calls.push('late'))
    expect(calls).toEqual(['a'])
    expect(flag.aborted).toBe(true)
    expect(flag.reason).toBe('first')
  })

  it('is accepted where an AbortSignal is, and other objects are not', () => {
    expect(isAbortSignalLike(new AbortFlag())).toBe(true)
    expect(isAbortSignalLike(new AbortController().signal)).toBe(true)
    expect(isAbortSignalLike({ aborted: 'no' })).toBe(false)
    expect(isAbortSignalLike(null)).toBe(false)
  })

  it('G5: aborts a queued acquire with its reason and leaves nothing in the queue', async () => {
    const store = createMemoryStore()
    const sem = createSemaphore(store, 'flag', { permits: 1 })
    const holder = await sem.acquire()
    const flag = new AbortFlag()
    const waiting = sem.acquire({ signal: flag })
    const fails = expect(waiting).rejects.toThrow('gone')
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect((await sem.stats()).queued).toBe(1)
    flag.abort(new Error('gone'))
    await fails
    expect((await sem.stats()).queued).toBe(0)
    await holder.release()
    await store.close()
  })

  it('rejects with an AbortError, never undefined, for a signal-like object without a reason', async () => {
    const store = createMemoryStore()
    const sem = createSemaphore(store, 'no-reason', { permits: 1 })
    const holder = await sem.acquire()
    let listener: (() => void) | undefined
    const signal = {
      aborted: false,
      addEventListener: (_type: 'abort', fn: () => void) => (listener = fn),
      removeEventListener: () => (listener = undefined),
    }
    const waiting = sem.acquire({ signal })
    const fails = expect(waiting).rejects.toMatchObject({ name: 'AbortError' })
    await new Promise((resolve) => setTimeout(resolve, 20))
    signal.aborted = true
    listener?.()
    await fails
    await expect(sem.acquire({ signal })).rejects.toMatchObject({ name: 'AbortError' }) // already aborted
    await holder.release()
    await store.close()
  })
})
