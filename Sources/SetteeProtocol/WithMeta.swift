import NIOCore

/// The options word of a SET_WITH_META / DEL_WITH_META request (kv_engine `docs/BinaryProtocol.md`).
public struct WithMetaOptions: OptionSet, Sendable, Hashable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// FORCE_ACCEPT_WITH_META_OPS (0x02): accepted whatever the bucket's conflict-resolution mode.
    public static let forceAcceptWithMetaOps = WithMetaOptions(rawValue: 0x02)
    /// REGENERATE_CAS (0x04): the server assigns a new CAS instead of the given one (only with skip).
    public static let regenerateCAS = WithMetaOptions(rawValue: 0x04)
    /// SKIP_CONFLICT_RESOLUTION_FLAG (0x08): the write wins whatever the stored version's metadata.
    public static let skipConflictResolution = WithMetaOptions(rawValue: 0x08)

    /// Every bit this server knows; a request with any other is refused.
    public static let known: WithMetaOptions = [.forceAcceptWithMetaOps, .regenerateCAS, .skipConflictResolution]
}

/// The extras of a SET_WITH_META (0xa2) or DEL_WITH_META (0xa8) request, kv_engine `docs/BinaryProtocol.md`:
/// flags (4, big-endian), expiry (4, absolute Unix seconds, 0 = never), revSeqno (8, the "seqno" field), CAS (8,
/// the document's CAS to store), then optionally options (4) and/or an extended-metadata length (2): 24, 26, 28
/// or 30 bytes. The request's header CAS is the compare-and-swap guard, separate from this one.
///
/// Pure: bytes in, a value or nil out, never a trap on hostile lengths.
public struct WithMetaRequest: Sendable, Equatable {
    public var flags: UInt32
    /// Absolute Unix seconds, 0 = never.
    public var expiry: UInt32
    /// The document's revision sequence number.
    public var revSeqno: UInt64
    /// The CAS the stored version is to carry (nanoseconds of the origin's hybrid clock).
    public var cas: UInt64
    public var options: WithMetaOptions

    public init(flags: UInt32, expiry: UInt32, revSeqno: UInt64, cas: UInt64, options: WithMetaOptions = []) {
        self.flags = flags
        self.expiry = expiry
        self.revSeqno = revSeqno
        self.cas = cas
        self.options = options
    }

    /// The extras lengths a with-meta request may carry.
    public static let extrasLengths = [24, 26, 28, 30]

    /// Parses `extras`. Nil (EINVAL) for a length other than 24/26/28/30, an unknown option bit, REGENERATE_CAS
    /// without SKIP_CONFLICT_RESOLUTION (kv_engine requires both), or a non-zero extended-metadata length (the
    /// legacy conflict-resolution-mode blob this server does not read).
    public static func parse(extras: ByteBuffer) -> WithMetaRequest? {
        let n = extras.readableBytes
        guard extrasLengths.contains(n) else { return nil }
        let base = extras.readerIndex
        guard let flags = extras.getInteger(at: base, as: UInt32.self),
            let expiry = extras.getInteger(at: base + 4, as: UInt32.self),
            let revSeqno = extras.getInteger(at: base + 8, as: UInt64.self),
            let cas = extras.getInteger(at: base + 16, as: UInt64.self)
        else { return nil }
        var options = WithMetaOptions()
        if n >= 28 {
            guard let raw = extras.getInteger(at: base + 24, as: UInt32.self) else { return nil }
            options = WithMetaOptions(rawValue: raw)
        }
        if n == 26 || n == 30 {
            guard let metaLength = extras.getInteger(at: base + n - 2, as: UInt16.self), metaLength == 0 else {
                return nil
            }
        }
        guard options.isSubset(of: .known) else { return nil }
        if options.contains(.regenerateCAS) && !options.contains(.skipConflictResolution) { return nil }
        return WithMetaRequest(flags: flags, expiry: expiry, revSeqno: revSeqno, cas: cas, options: options)
    }

    /// The 28-byte extras (with options) a client sends.
    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(flags)
        buffer.writeInteger(expiry)
        buffer.writeInteger(revSeqno)
        buffer.writeInteger(cas)
        buffer.writeInteger(options.rawValue)
    }
}
