import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A deliberately simple blocking memcached-binary client for tests: write any bytes (including
/// malformed ones), read whole frames back. Built on the same codec as the server, so the tests
/// check semantics, while memccapable and the SDK check the codec against independent clients.
package final class TestKVClient {
    package let fd: Int32
    private var inbound = ByteBuffer()
    private var nextOpaque: UInt32 = 1

    /// `source`: a loopback address to connect from (`127.0.0.2`: Linux routes all of 127/8 to lo), so a test can be
    /// a second client address to the server; nil: the kernel picks (127.0.0.1).
    package init(port: Int, timeoutSeconds: Int = 60, source: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket failed") }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                close(fd)
                throw TestSupportError("bind to \(source) failed: errno \(errno)")
            }
        }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            close(fd)
            throw TestSupportError("connect to \(port) failed: errno \(errno)")
        }
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close(fd) }

    package func opaque() -> UInt32 {
        defer { nextOpaque &+= 1 }
        return nextOpaque
    }

    package func send(_ buffer: ByteBuffer) throws {
        var offset = 0
        let bytes = Array(buffer.readableBytesView)
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { throw TestSupportError("send failed: errno \(errno)") }
            offset += n
        }
    }

    package func send(bytes: [UInt8]) throws { try send(ByteBuffer(bytes: bytes)) }

    /// Reads one frame; throws if the server closed the connection or the read timed out.
    package func receive() throws -> Frame {
        while true {
            if let f = try FrameDecoder.decode(&inbound, maxBodyLength: 64 * 1024 * 1024) { return f }
            var chunk = [UInt8](repeating: 0, count: 256 * 1024)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { throw TestSupportError("connection closed by server") }
            if n < 0 { throw TestSupportError("recv failed: errno \(errno)") }
            inbound.writeBytes(chunk[0..<n])
        }
    }

    /// Whether the server has closed the connection (reads EOF within the timeout).
    package func isClosedByServer() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    /// Everything the peer sends until it closes the connection or the receive timeout passes; `closed`: it closed.
    package func readUntilClosed() -> (bytes: [UInt8], closed: Bool) { read(until: { _ in false }) }

    /// What the peer sends until `done` holds for all the bytes read so far, the peer closes, or the receive timeout
    /// passes (raw bytes: an HTTP answer, a websocket frame); `closed`: it closed or reset the connection. The one
    /// raw read loop of the tests that speak something other than memcached-binary over this client.
    package func read(until done: ([UInt8]) -> Bool) -> (bytes: [UInt8], closed: Bool) {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while !done(bytes) {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return (bytes, true) }
            if n < 0 { return (bytes, errno == ECONNRESET) }
            bytes += chunk[0..<n]
        }
        return (bytes, false)
    }

    /// Sends one request and returns its response.
    package func request(
        _ opcode: Opcode, key: String = "", value: [UInt8] = [], extras: [UInt8] = [], vbucket: UInt16? = nil,
        cas: UInt64 = 0, datatype: UInt8 = 0, framingExtras: [UInt8] = []
    ) throws -> Frame {
        var b = ByteBuffer()
        let keyBytes = Array(key.utf8)
        let vb = vbucket ?? VBucketHash.vbucket(forKey: keyBytes).rawValue
        b.writeRequest(
            opcode: opcode, vbucket: vb, opaque: opaque(), cas: cas, datatype: datatype, framingExtras: framingExtras,
            extras: extras, key: keyBytes, value: value)
        try send(b)
        return try receive()
    }

    /// STAT of `group` ("" for the general group): every statistic until the closing empty key.
    package func stats(_ group: String = "") throws -> [String: String] {
        var b = ByteBuffer()
        b.writeRequest(
            opcode: .stat, vbucket: 0, opaque: opaque(), cas: 0, datatype: 0, framingExtras: [], extras: [],
            key: Array(group.utf8), value: [])
        try send(b)
        var map: [String: String] = [:]
        while true {
            let r = try receive()
            guard r.status == .success else { throw TestSupportError("STAT \(group): \(r.status)") }
            if r.key.readableBytes == 0 { return map }
            map[String(buffer: r.key)] = String(buffer: r.value)
        }
    }

    package func hello(_ features: [HelloFeature]) throws {
        var v: [UInt8] = []
        for f in features { v += [UInt8(f.rawValue >> 8), UInt8(f.rawValue & 0xff)] }
        let r = try request(.hello, key: "settee-tests", value: v)
        guard r.status == .success else { throw TestSupportError("HELLO failed: \(r.status)") }
    }

    package func authenticate(user: String, password: String) throws -> Status {
        let r = try request(.saslAuth, key: "PLAIN", value: [0] + Array(user.utf8) + [0] + Array(password.utf8))
        return r.status
    }

    package static func setExtras(flags: UInt32, expiry: UInt32) -> [UInt8] {
        var b = ByteBuffer()
        b.writeInteger(flags)
        b.writeInteger(expiry)
        return Array(b.readableBytesView)
    }
}

extension Frame {
    package var valueBytes: [UInt8] { Array(value.readableBytesView) }
    package var flags: UInt32 { extras.getInteger(at: extras.readerIndex, as: UInt32.self) ?? 0 }
    /// (vbuuid, seqno) of a mutation response with MutationSeqno negotiated.
    package var mutationToken: (UInt64, UInt64)? {
        guard extras.readableBytes == 16 else { return nil }
        return (
            extras.getInteger(at: extras.readerIndex, as: UInt64.self)!,
            extras.getInteger(at: extras.readerIndex + 8, as: UInt64.self)!
        )
    }
}

/// Why a test-support helper failed (not the code under test).
package struct TestSupportError: Error, CustomStringConvertible {
    package var description: String
    package init(_ d: String) { description = d }
}
