// What a lean connection has read and not parsed yet: the reads as they came while nothing is in
// flight, and the reads behind a request in flight (pipelined ones) copied into blocks, so what is
// held costs about its bytes. connection.ts bounds how much it may hold.

/** Reads behind the first one in flight are copied into blocks, each as large as what is held (so
 * at most twice that), from 256 bytes up to 4 KB: a Buffer costs ~350 bytes besides its own (V8 heap
 * and backing store), so a read-ahead trickled in a byte per packet and kept as read cost ~350 bytes
 * per byte. */
const MIN_BLOCK = 256
const BLOCK = 4096

export class ReadAhead {
  /** Bytes read and not parsed yet: joined only when a head is looked for (not per packet). */
  private chunks: Buffer[] = []
  /** Those bytes, with the block's. */
  private held = 0
  /** The block being filled with reads behind a request in flight, after `chunks`. */
  private block: Buffer | undefined
  private blockUsed = 0

  /** Bytes held. */
  get bytes(): number {
    return this.held
  }

  /** Buffers held (readAheadHeld() in front-end.ts reports them). */
  get buffers(): number {
    return this.chunks.length + (this.block === undefined ? 0 : 1)
  }

  /** A read while nothing is in flight: kept as it came (a head is looked for in it at once). */
  add(chunk: Buffer): void {
    this.chunks.push(chunk)
    this.held += chunk.length
  }

  /** A read behind the request in flight: the first as it came (a pipelining client's requests
   * mostly come in one read), later ones copied into blocks, so what is held costs its bytes. */
  keep(chunk: Buffer): void {
    const wasEmpty = this.held === 0
    this.held += chunk.length
    if (wasEmpty) {
      this.chunks.push(chunk)
      return
    }
    for (let at = 0; at < chunk.length;) {
      let block = this.block
      if (block === undefined || this.blockUsed === block.length) {
        this.seal()
        const size = Math.min(BLOCK, Math.max(MIN_BLOCK, this.held))
        block = this.block = Buffer.allocUnsafeSlow(Math.max(size, chunk.length - at))
      }
      const copied = chunk.copy(block, this.blockUsed, at)
      this.blockUsed += copied
      at += copied
    }
  }

  /** Everything held, as one buffer (copied only when it came in pieces), which is then what is held. */
  joined(): Buffer {
    this.seal()
    if (this.chunks.length === 1) return this.chunks[0] as Buffer
    const bytes = Buffer.concat(this.chunks)
    if (bytes.length > 0) this.chunks = [bytes]
    return bytes
  }

  /** Hold only what follows `at` in `bytes` (joined() just returned them, and a head ended at `at`). */
  from(bytes: Buffer, at: number): void {
    if (at === bytes.length) return this.drop()
    this.chunks = [bytes.subarray(at)]
    this.held = bytes.length - at
  }

  /** Hold nothing. */
  drop(): void {
    this.chunks = []
    this.held = 0
    this.block = undefined
    this.blockUsed = 0
  }

  /** The block's bytes join `chunks`. */
  private seal(): void {
    const block = this.block
    if (block === undefined) return
    this.chunks.push(this.blockUsed === block.length ? block : block.subarray(0, this.blockUsed))
    this.block = undefined
    this.blockUsed = 0
  }
}
