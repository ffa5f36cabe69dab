// What both adapters do around the admission, in one place so they cannot drift: listen for the
// response's close before any await (a client that leaves while queued aborts its wait, and an
// admitted request's permit is released exactly once, when its response closes: finish, abort, error,
// timeout), admit, and act on a lost lease (onLost: 'abort' destroys the response).
import { AbortFlag } from '../core/abort.js'
import type { ServerResponse } from 'node:http'
import type { Admission, TollgateInfo } from '../admission/admission.js'
import type { HttpAnswer } from '../admission/response.js'
import { whenLost } from '../core/client/lease.js'

/** The abort reason of a request whose response closed (one object: no stack captured per request). */
const RESPONSE_CLOSED = new Error('response closed')

export type Watched =
  /** The client left: nothing to answer. */
  | { outcome: 'gone' }
  /** Answer with this rejection (the onRejected hook has run). */
  | { outcome: 'rejected'; answer: HttpAnswer }
  /** Go on to the handler, with these response headers. */
  | { outcome: 'admitted'; info: TollgateInfo; headers: Record<string, string> }

export async function admitWatched<Req>(
  admission: Admission<Req>,
  req: Req,
  res: ServerResponse,
): Promise<Watched> {
  const gone = new AbortFlag()
  let held: TollgateInfo | undefined
  res.once('close', () => {
    gone.abort(RESPONSE_CLOSED)
    if (held) void admission.release(held)
    held = undefined
  })
  let result
  try {
    result = await admission.admit(req, gone)
  } catch (error) {
    if (gone.aborted) return { outcome: 'gone' } // the client left while waiting
    throw error // a bug (e.g. a throwing key()): the framework answers 500
  }
  if (result.outcome === 'rejected') {
    if (gone.aborted) return { outcome: 'gone' }
    admission.notifyRejected(req, result.rejection)
    return { outcome: 'rejected', answer: admission.rejectionResponse(result.rejection) }
  }
  const { info, left } = result
  if (gone.aborted) {
    void admission.release(info)
    return { outcome: 'gone' }
  }
  held = info
  if (info.lease) {
    whenLost(info.lease, (error) => {
      if (admission.lost(info, error) && !res.writableFinished) res.destroy()
    })
  }
  return { outcome: 'admitted', info, headers: admission.policyHeaders(info.name, info.permits, left) }
}
