import Foundation
import NIOConcurrencyHelpers
import NIOCore
import SetteeAuth
import SetteeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A scripted memcached-binary peer on 127.0.0.1 for what one real node cannot show: a node that
/// answers NOT_MY_VBUCKET, pushes a config, or never answers. Each accepted connection runs on its
/// own thread; `respond` maps a request to the bytes to send back (nil: stay silent).
final class FakeKVNode: @unchecked Sendable {
    let port: Int
    private let listener: LoopbackListener
    private let respond: @Sendable (Frame) -> ByteBuffer?
    /// Opcodes received, in order (all connections).
    let received = NIOLockedValueBox<[Opcode]>([])

    init(respond: @escaping @Sendable (Frame) -> ByteBuffer?) throws {
        self.respond = respond
        listener = try LoopbackListener(name: "fake node")
        port = listener.port
        listener.start { [self] fd in serve(fd) }
    }

    private func serve(_ fd: Int32) {
        var inbound = ByteBuffer()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return }
            inbound.writeBytes(chunk[0..<n])
            while let frame = try? FrameDecoder.decode(&inbound, maxBodyLength: 1 << 24) {
                received.withLockedValue { $0.append(frame.opcode) }
                guard let out = respond(frame) else { continue }
                let bytes = Array(out.readableBytesView)
                _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
        }
    }

    func stop() { listener.stop() }

    /// A response frame for `request`.
    static func response(
        to request: Frame, status: Status = .success, datatype: UInt8 = 0, extras: [UInt8] = [], value: [UInt8] = []
    ) -> ByteBuffer {
        var b = ByteBuffer()
        b.writeResponseHeader(
            opcode: request.opcode, status: status, opaque: request.opaque, datatype: datatype,
            extrasLength: extras.count, valueLength: value.count)
        b.writeBytes(extras)
        b.writeBytes(value)
        return b
    }

    /// A config naming only `kvPort` as the owner of all 1024 vBuckets, at revision (epoch, rev).
    static func forgedConfig(kvPort: Int, epoch: Int = 0, rev: Int = 0) -> [UInt8] {
        let map = Array(repeating: "[0]", count: 1024).joined(separator: ",")
        return Array(
            """
            {"rev":\(rev),"revEpoch":\(epoch),"name":"demo","nodesExt":[{"hostname":"$HOST","services":{"kv":\(kvPort)}}],\
            "vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["$HOST:\(kvPort)"],"vBucketMap":[\(map)]}}
            """.utf8)
    }

    /// A CLUSTERMAP_CHANGE_NOTIFICATION push (server request) for bucket `demo` carrying `config` at
    /// revision (1, 9999): newer than any map the tests start from.
    static func mapPush(_ config: [UInt8]) -> ByteBuffer {
        var b = ByteBuffer()
        var extras: [UInt8] = []
        for v in [UInt64(1), UInt64(9999)] { withUnsafeBytes(of: v.bigEndian) { extras += $0 } }
        b.writeServerRequest(
            opcode: .clustermapChangeNotification, datatype: 1, extras: extras, key: Array("demo".utf8), value: config)
        return b
    }

    /// The passwords every fake accepts (for any user name: tests' own, and `ServerProcess`'s so one set of client
    /// options serves a fake and a real node), checked with SCRAM-SHA512 as a real node does: first-party clients
    /// refuse to log in with PLAIN on a clear connection.
    static let passwords = ["p", "password"]
    private static let scramKeys = passwords.map {
        ScramKeys.derive(password: $0, salt: Array("fake-node-salt".utf8), iterations: 4096, hash: .sha512)
    }
    /// SCRAM exchanges between SASL_AUTH and SASL_STEP, by the server nonce they were challenged with.
    private static let exchanges = NIOLockedValueBox<[String: ScramServer]>([:])

    /// SASL_LIST_MECHS, SASL_AUTH and SASL_STEP of a node that speaks SCRAM-SHA512 only; `keys` (the first one
    /// also the decoy) replace the fake's own, e.g. to make a client run PBKDF2 with a high iteration count.
    static func sasl(_ f: Frame, keys: [ScramKeys]? = nil) -> ByteBuffer {
        let scramKeys = keys ?? Self.scramKeys
        let message = Array(f.value.readableBytesView)
        switch f.opcode {
        case .saslListMechs:
            return response(to: f, value: Array("SCRAM-SHA512".utf8))
        case .saslAuth:
            var server = ScramServer(hash: .sha512)
            let nonce = UUID().uuidString
            guard
                case .challenge(let first) = server.receiveClientFirst(
                    message, keys: scramKeys[0], decoy: scramKeys[0], serverNonce: nonce,
                    alsoAccept: Array(scramKeys.dropFirst()))
            else { return response(to: f, status: .authError) }
            exchanges.withLockedValue { $0[nonce] = server }
            return response(to: f, status: .authContinue, value: first)
        default:
            let text = String(decoding: message, as: UTF8.self)
            let found = exchanges.withLockedValue { all -> ScramServer? in
                guard let nonce = all.keys.first(where: { text.contains($0) }) else { return nil }
                return all.removeValue(forKey: nonce)
            }
            guard var server = found, case .success(_, let final) = server.receiveClientFinal(message) else {
                return response(to: f, status: .authError)
            }
            return response(to: f, value: final)
        }
    }

    /// Handshake answers every fake uses: HELLO (no features) and SELECT_BUCKET succeed, SASL as `sasl`,
    /// GET_CLUSTER_CONFIG returns `config()`. Nil for any other opcode.
    static func handshake(_ f: Frame, config: () -> [UInt8]) -> ByteBuffer? {
        switch f.opcode {
        case .saslListMechs, .saslAuth, .saslStep: return sasl(f)
        case .hello, .selectBucket: return response(to: f)
        case .getClusterConfig: return response(to: f, datatype: 1, value: config())
        default: return nil
        }
    }
}
