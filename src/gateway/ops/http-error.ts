/** An answer the admin listener gives a request it refuses: its status, a message in the user's words
 * (sent as {"error": message}), and headers such as Allow. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
  }
}
