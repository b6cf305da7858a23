import CZlib

/// The four bytes every `Z_SYNC_FLUSH` ends with (an empty stored block's LEN/NLEN). BLIP leaves them out of a
/// compressed frame and the receiver puts them back (BLIP Protocol 3.0, §3.6.1).
let blipDeflateTrailer: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

/// The sending side's deflate context (§3.6): one per connection, shared by every frame sent with the
/// `compressed` flag, raw deflate (no zlib or gzip wrapper), window 2^15, each frame flushed with `Z_SYNC_FLUSH`
/// and its trailing `00 00 FF FF` removed. Owns zlib memory (~256 KiB at level 6); not thread-safe, not copyable.
public final class BLIPDeflater {
    private let stream: UnsafeMutablePointer<z_stream>

    /// - Parameter level: zlib's 1...9 (LiteCore's default is 6).
    /// - Returns: nil when zlib cannot allocate its state; the connection then sends frames uncompressed (legal:
    ///   the flag is per frame).
    public init?(level: Int32 = 6) {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard CZlib_deflateInit2(stream, level, -15, 8) == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            return nil
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// The deflated bytes of `input`, ending on a block boundary, without the sync flush's `00 00 FF FF`.
    /// Returns nil if zlib fails (only on a corrupt stream state); the connection then fails the send.
    public func compress(_ input: ArraySlice<UInt8>) -> [UInt8]? {
        var output: [UInt8] = []
        var capacity = Int(deflateBound(stream, uLong(input.count))) + 16
        let ok = input.withUnsafeBufferPointer { src -> Bool in
            stream.pointee.next_in = UnsafeMutablePointer(mutating: src.baseAddress)
            stream.pointee.avail_in = uInt(src.count)
            while true {
                let start = output.count
                output.append(contentsOf: repeatElement(0, count: capacity))
                let rc = output.withUnsafeMutableBufferPointer { dst -> Int32 in
                    stream.pointee.next_out = dst.baseAddress.map { $0 + start }
                    stream.pointee.avail_out = uInt(capacity)
                    return deflate(stream, Z_SYNC_FLUSH)
                }
                let unused = Int(stream.pointee.avail_out)
                output.removeLast(unused)
                guard rc == Z_OK || rc == Z_BUF_ERROR else { return false }
                // Done once zlib took all input and had room left over: the flush is then complete.
                if stream.pointee.avail_in == 0 && unused > 0 { return true }
                capacity = 4096
            }
        }
        stream.pointee.next_in = nil
        stream.pointee.next_out = nil
        guard ok, output.count >= 4, Array(output.suffix(4)) == blipDeflateTrailer else { return nil }
        output.removeLast(4)
        return output
    }
}

/// The receiving side's inflate context (§3.6): one per connection, every compressed frame's data passes it in
/// order, the removed `00 00 FF FF` appended first. Output is bounded per call, so a small frame cannot inflate
/// into unbounded memory (a decompression bomb stops at the limit with an error).
public final class BLIPInflater {
    private let stream: UnsafeMutablePointer<z_stream>
    private var ended = false

    /// - Returns: nil when zlib cannot allocate its state.
    public init?() {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard CZlib_inflateInit2(stream, -15) == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            return nil
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Inflates one frame's compressed data (without the trailer) and appends the result to `output`.
    /// - Parameter limit: the most bytes this frame may add; one more is an error.
    /// - Throws: `BLIPProtocolViolation.badDeflateData` (corrupt data, or a final block: the stream cannot go on),
    ///   `.inflatedFrameTooLarge(limit:)` past `limit`.
    public func inflate(
        _ input: ArraySlice<UInt8>, limit: Int, appendingTo output: inout [UInt8]
    ) throws(BLIPProtocolViolation) {
        guard !ended else { throw .badDeflateData("the deflate stream has ended") }
        let data = Array(input) + blipDeflateTrailer
        var produced = 0
        // Output grows in chunks from about 4 times the input (deflated JSON is mostly 3-10 times smaller) up to
        // 64 KiB, so a small frame does not zero 64 KiB first.
        var chunk = min(64 * 1024, max(1024, input.count * 4))
        var failure: BLIPProtocolViolation?
        data.withUnsafeBufferPointer { src in
            stream.pointee.next_in = UnsafeMutablePointer(mutating: src.baseAddress)
            stream.pointee.avail_in = uInt(src.count)
            while failure == nil {
                // Room for up to 64 KiB more, and one byte past the limit so "more than the limit" shows.
                let room = max(1, min(chunk, limit + 1 - produced))
                chunk = min(64 * 1024, chunk * 2)
                let start = output.count
                output.append(contentsOf: repeatElement(0, count: room))
                let rc = output.withUnsafeMutableBufferPointer { dst -> Int32 in
                    stream.pointee.next_out = dst.baseAddress.map { $0 + start }
                    stream.pointee.avail_out = uInt(room)
                    return CZlib.inflate(stream, Z_SYNC_FLUSH)
                }
                let unused = Int(stream.pointee.avail_out)
                output.removeLast(unused)
                produced += room - unused
                if produced > limit {
                    failure = .inflatedFrameTooLarge(limit: limit)
                    break
                }
                switch rc {
                case Z_OK, Z_BUF_ERROR:
                    // All input taken and output not full: everything this frame holds is out.
                    if stream.pointee.avail_in == 0 && unused > 0 { return }
                    if rc == Z_BUF_ERROR && unused > 0 {
                        failure = .badDeflateData("zlib made no progress")
                    }
                case Z_STREAM_END:
                    ended = true
                    failure = .badDeflateData("a final deflate block (the stream must stay open)")
                case Z_DATA_ERROR:
                    let message = stream.pointee.msg.map { String(cString: $0) } ?? "corrupt"
                    failure = .badDeflateData(message)
                default:
                    failure = .badDeflateData("zlib error \(rc)")
                }
            }
        }
        stream.pointee.next_in = nil
        stream.pointee.next_out = nil
        if let failure {
            ended = true
            throw failure
        }
    }
}
