import NIOCore
import SetteeProtocol

/// memcached binary protocol through `SetteeProtocol`'s own codec: requests with
/// `ByteBuffer.writeRequest`, responses with `FrameDecoder.decode`. Every request carries the key's
/// vBucket (`VBucketHash`), which a single settee node requires and memcached ignores.
public struct MemcachedBinaryCodec: LoadCodec {
    public typealias Shared = KeySpace
    /// SET extras: flags (4 bytes) and expiry (4 bytes), both zero.
    static let setExtras: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
    /// Big enough for any value this tool sends; a larger body means the stream is corrupt.
    static let maxBodyLength = 64 << 20

    let keySpace: KeySpace

    public static func prepare(_ keySpace: KeySpace) -> KeySpace { keySpace }
    public init(shared: KeySpace) { self.keySpace = shared }

    public func writeGet(key: Int, opaque: UInt32, into buffer: inout ByteBuffer) {
        buffer.writeRequest(opcode: .get, vbucket: keySpace.vbuckets[key], opaque: opaque, key: keySpace.keys[key])
    }

    public func writeSet(key: Int, opaque: UInt32, into buffer: inout ByteBuffer) {
        buffer.writeRequest(
            opcode: .set, vbucket: keySpace.vbuckets[key], opaque: opaque, extras: Self.setExtras,
            key: keySpace.keys[key], value: keySpace.value)
    }

    public mutating func decode(_ buffer: inout ByteBuffer) throws(ProtocolViolation) -> DecodedResponse? {
        let frame: Frame?
        do {
            frame = try FrameDecoder.decode(&buffer, maxBodyLength: Self.maxBodyLength)
        } catch {
            throw ProtocolViolation(description: "memcached-binary: \(error)")
        }
        guard let frame else { return nil }
        guard frame.magic == .clientResponse || frame.magic.rawValue == 0x18 else {
            throw ProtocolViolation(
                description: "memcached-binary: unexpected magic 0x\(String(frame.magic.rawValue, radix: 16))")
        }
        let outcome: ResponseOutcome
        switch frame.status {
        case .success: outcome = .ok
        case .keyNotFound: outcome = .miss
        case .temporaryFailure, .outOfMemory: outcome = .temporary(Self.name(of: frame.status))
        default: outcome = .error(Self.name(of: frame.status))
        }
        return DecodedResponse(opaque: frame.opaque, outcome: outcome)
    }

    static func name(of status: Status) -> String {
        let names: [Status: String] = [
            .keyExists: "KEY_EEXISTS", .valueTooLarge: "E2BIG", .invalidArguments: "EINVAL", .notStored: "NOT_STORED",
            .notMyVBucket: "NOT_MY_VBUCKET", .noBucket: "NO_BUCKET", .locked: "LOCKED", .authError: "AUTH_ERROR",
            .accessDenied: "EACCESS", .unknownCommand: "UNKNOWN_COMMAND", .outOfMemory: "ENOMEM",
            .notSupported: "NOT_SUPPORTED", .internalError: "EINTERNAL", .busy: "EBUSY", .temporaryFailure: "ETMPFAIL",
        ]
        return "status \(status)" + (names[status].map { " \($0)" } ?? "")
    }
}
