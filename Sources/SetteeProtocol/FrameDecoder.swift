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
        let base = buffer.readerIndex
        let magic = Magic(rawValue: buffer.getInteger(at: base, as: UInt8.self)!)
        guard magic.isKnown else { throw .unknownMagic(magic.rawValue) }
        let opcode = Opcode(buffer.getInteger(at: base + 1, as: UInt8.self)!)
        let framingExtrasLength: Int
        let keyLength: Int
        if magic.hasFramingExtras {
            framingExtrasLength = Int(buffer.getInteger(at: base + 2, as: UInt8.self)!)
            keyLength = Int(buffer.getInteger(at: base + 3, as: UInt8.self)!)
        } else {
            framingExtrasLength = 0
            keyLength = Int(buffer.getInteger(at: base + 2, as: UInt16.self)!)
        }
        let header = FrameHeader(
            magic: magic, opcode: opcode, framingExtrasLength: framingExtrasLength, keyLength: keyLength,
            extrasLength: Int(buffer.getInteger(at: base + 4, as: UInt8.self)!),
            datatype: buffer.getInteger(at: base + 5, as: UInt8.self)!,
            vbucketOrStatus: buffer.getInteger(at: base + 6, as: UInt16.self)!,
            bodyLength: Int(buffer.getInteger(at: base + 8, as: UInt32.self)!),
            opaque: buffer.getInteger(at: base + 12, as: UInt32.self)!,
            cas: buffer.getInteger(at: base + 16, as: UInt64.self)!)
        return header
    }

    /// Decodes one frame, consuming it from `buffer`; nil (consuming nothing) when the frame is not
    /// complete yet. Throws when the stream is not valid (see `FrameDecodingError`).
    @inlinable
    public static func decode(
        _ buffer: inout ByteBuffer, maxBodyLength: Int
    ) throws(FrameDecodingError) -> Frame? {
        guard let h = try peekHeader(buffer) else { return nil }
        if h.framingExtrasLength + h.extrasLength + h.keyLength > h.bodyLength { throw .inconsistentLengths(h) }
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
