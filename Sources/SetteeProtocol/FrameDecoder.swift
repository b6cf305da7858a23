import NIOCore

/// Why a byte stream is not a valid sequence of frames. After any of these the stream cannot be
/// trusted, except `bodyTooLarge`, whose body length is known and can be skipped.
public enum FrameDecodingError: Error, Equatable, Sendable {
    /// The first byte is not a known magic.
    case unknownMagic(UInt8)
    /// The sections (framing extras + extras + key) are longer than the declared body.
    case inconsistentLengths(FrameHeader)
    /// The declared body is larger than the limit. The header is valid, so the caller may answer
    /// E2BIG and discard `header.bodyLength` bytes.
    case bodyTooLarge(FrameHeader)
}

/// Pure, allocation-free decoder of memcached-binary frames from a `ByteBuffer`.
public enum FrameDecoder {
    /// Reads the 24-byte header at the buffer's reader index without consuming it; nil when fewer
    /// than 24 bytes are buffered.
    @inlinable
    public static func peekHeader(_ buffer: ByteBuffer) throws(FrameDecodingError) -> FrameHeader? {
        guard buffer.readableBytes >= Frame.headerLength else { return nil }
        // The header as three big-endian words in one read: ten `getInteger`s were ten bounds and
        // exclusivity-checked reads per frame (issue 19, ADR 0065).
        let (word0, word1, cas) = buffer.withUnsafeReadableBytes { p in
            (
                UInt64(bigEndian: p.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                UInt64(bigEndian: p.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                UInt64(bigEndian: p.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
            )
        }
        let magic = Magic(rawValue: UInt8(truncatingIfNeeded: word0 >> 56))
        guard magic.isKnown else { throw .unknownMagic(magic.rawValue) }
        return FrameHeader(magic: magic, word0: word0, word1: word1, cas: cas)
    }

    /// Decodes one frame, consuming it from `buffer`; nil (consuming nothing) when the frame is not
    /// complete yet. Throws when the stream is not valid (see `FrameDecodingError`).
    @inlinable
    public static func decode(
        _ buffer: inout ByteBuffer, maxBodyLength: Int
    ) throws(FrameDecodingError) -> Frame? {
        guard let h = try peekHeader(buffer) else { return nil }
        if !h.sectionsFitBody { throw .inconsistentLengths(h) }
        if h.bodyLength > maxBodyLength { throw .bodyTooLarge(h) }
        guard buffer.readableBytes >= Frame.headerLength + h.bodyLength else { return nil }
        buffer.moveReaderIndex(forwardBy: Frame.headerLength)
        let valueLength = h.bodyLength - h.framingExtrasLength - h.extrasLength - h.keyLength
        // The lengths were checked above, so these slices cannot fail.
        let framing = buffer.readSlice(length: h.framingExtrasLength)!
        let extras = buffer.readSlice(length: h.extrasLength)!
        let key = buffer.readSlice(length: h.keyLength)!
        let value = buffer.readSlice(length: valueLength)!
        return Frame(
            magic: h.magic, opcode: h.opcode, datatype: h.datatype, vbucketOrStatus: h.vbucketOrStatus,
            opaque: h.opaque, cas: h.cas, framingExtras: framing, extras: extras, key: key, value: value)
    }
}

extension FrameDecoder {
    /// Hands `body` the vBucket and key bytes of each whole request frame at the start of `bytes` whose opcode carries
    /// a document key, in order, without decoding or consuming anything; `body` returns false to stop. Stops at the
    /// first frame that is not whole, not a request, or whose lengths do not add up (the decoder judges those
    /// frames; this only looks ahead, for `BucketEngine.warm`, ADR 0114). A key is handed as it is on the wire: a
    /// collection-aware connection's keys start with their collection's ID.
    @inlinable
    public static func forEachRequestKey(
        in bytes: UnsafeRawBufferPointer, _ body: (_ vbucket: UInt16, _ key: UnsafeRawBufferPointer) -> Bool
    ) {
        var at = 0
        while bytes.count - at >= Frame.headerLength {
            let magic = Magic(rawValue: bytes[at])
            guard magic == .clientRequest || magic == .altClientRequest else { return }
            let h = FrameHeader(
                magic: magic, word0: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)),
                word1: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self)), cas: 0)
            guard h.sectionsFitBody, h.bodyLength <= bytes.count - at - Frame.headerLength else { return }
            if h.opcode.carriesDocumentKey {
                let keyStart = at + Frame.headerLength + h.framingExtrasLength + h.extrasLength
                let key = UnsafeRawBufferPointer(rebasing: bytes[keyStart..<keyStart + h.keyLength])
                if !body(h.vbucketOrStatus, key) { return }
            }
            at += Frame.headerLength + h.bodyLength
        }
    }
}
