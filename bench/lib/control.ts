// Calls to the bench's own helper processes (load generators, the upstream simulator): JSON over
// HTTP on 127.0.0.1.

/** POST `body` as JSON to `url`; its JSON answer, or an Error naming the helper's `error`. */
export async function post<T>(url: string, body?: unknown, timeoutMs = 60_000): Promise<T> {
  const response = await fetch(url, {
    method: 'POST',
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  })
  const data = (await response.json()) as T & { error?: string }
  if (!response.ok) throw new Error(`POST ${url}: ${data.error ?? response.status}`)
  return data
}
