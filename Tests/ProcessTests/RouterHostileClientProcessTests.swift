import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Clients that try to make `settee-router` hold memory, descriptors or time, against a real node and router on
/// loopback. Serialized: each starts its own node and router, and the machine has two cores.
@Suite(.serialized, .onTestThreads) struct RouterHostileClientProcessTests {
    /// Proves a client that pipelines GETs of a large document and never reads cannot make the router hold every
    /// answer: 256 GETs of a 4 MiB value (1 GiB of answers) sent in one write, not read for 3 s, grow the router's RSS
    /// by less than 200 MB (it stops taking requests once `routerMaxForwardsInFlight` wait for the node or its
    /// client's socket is full); then the client reads and every answer arrives intact, in order. The router used
    /// to forward all of them and hold each answer (RSS growth past 1 GB).
    @Test func neverReadingPipelinerIsBounded() throws {
        let server = try ServerProcess.started(name: "router-pipeliner")
        defer { server.stopAndRemove() }
        try server.initialize()
        let router = try RouterProcess(server: server)
        let pid = router.process.processIdentifier
        let value = (0..<(4 * 1024 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) }
        let setter = try TestKVClient(port: router.port)
        let set = try setter.request(
            .set, key: "big", value: value, extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(set.status == .success)
        #expect(try setter.request(.get, key: "big").value.readableBytes == value.count)
        let before = try #require(residentBytes(pid: pid))

        let count = 256
        let pipeliner = try TestKVClient(port: router.port, timeoutSeconds: 20)
        var batch = ByteBuffer()
        for i in 0..<count {
            batch.writeRequest(opcode: .get, vbucket: 0, opaque: UInt32(i), key: Array("big".utf8))
        }
        try pipeliner.send(batch)
        var peak = before
        let until = Date().addingTimeInterval(3)
        while Date() < until {
            peak = max(peak, residentBytes(pid: pid) ?? 0)
            usleep(50_000)
        }
        let growth = peak - before
        #expect(growth < 200_000_000, "router RSS grew by \(growth / 1_000_000) MB with \(count) GETs unread")

        for i in 0..<count {
            let r = try pipeliner.receive()
            #expect(r.status == .success && r.opaque == UInt32(i), "answer \(i): \(r.status) opaque \(r.opaque)")
            let intact = r.value.withUnsafeReadableBytes { got in
                value.withUnsafeBytes { want in
                    got.count == want.count && memcmp(got.baseAddress!, want.baseAddress!, want.count) == 0
                }
            }
            #expect(intact, "answer \(i): \(r.value.readableBytes) bytes, not the value stored")
            if !intact { break }
        }
        #expect(try pipeliner.request(.noop).status == .success)
    }

    /// Proves that with `--require-auth` a client that has not logged in cannot make the router buffer a large
    /// frame: a SET declaring a 1 MiB body, of which 64 KiB are sent, closes the connection at once (the router used
    /// to wait for, and buffer, the whole body), nor read its STAT; after logging in the same frame is forwarded and
    /// stored.
    @Test func strangerLargeFrameClosesConnection() throws {
        let server = try ServerProcess.started(name: "router-bigframe")
        defer { server.stopAndRemove() }
        try server.initialize()
        let router = try RouterProcess(server: server, extraArguments: ["--require-auth"])
        var frame = ByteBuffer()
        frame.writeRequest(
            opcode: .set, vbucket: 0, opaque: 1, extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            key: Array("k".utf8), value: [UInt8](repeating: 0x61, count: 1024 * 1024))
        let stranger = try TestKVClient(port: router.port, timeoutSeconds: 5)
        try stranger.send(ByteBuffer(bytes: Array(frame.readableBytesView.prefix(64 * 1024))))
        #expect(stranger.isClosedByServer(), "a stranger's partial 1 MiB frame left the connection open")
        // Nor may a stranger read the router's STAT (it named the node and counted every connection).
        let peeker = try TestKVClient(port: router.port, timeoutSeconds: 5)
        #expect(try peeker.request(.stat).status == .accessDenied)

        let member = try TestKVClient(port: router.port, timeoutSeconds: 10)
        #expect(try member.authenticate(user: server.user, password: server.password) == .success)
        try member.send(frame)
        #expect(try member.receive().status == .success)
    }

    /// Proves that with `--require-auth` connections that do not log in are closed after the handshake deadline
    /// (`--handshake-timeout 1` here), silent or half-way through a frame, while a client that logged in is still
    /// served after it; STAT counts them. The router used to keep them open for ever.
    @Test func idleStrangersAreClosed() throws {
        let server = try ServerProcess.started(name: "router-idle")
        defer { server.stopAndRemove() }
        try server.initialize()
        let router = try RouterProcess(server: server, extraArguments: ["--require-auth", "--handshake-timeout", "1"])
        let member = try TestKVClient(port: router.port, timeoutSeconds: 10)
        #expect(try member.authenticate(user: server.user, password: server.password) == .success)
        let silent = try (0..<20).map { _ in try TestKVClient(port: router.port, timeoutSeconds: 6) }
        let halfSent = try TestKVClient(port: router.port, timeoutSeconds: 6)
        try halfSent.send(bytes: [0x80, UInt8(Opcode.noop.rawValue), 0, 0])
        let started = Date()
        let closed = (silent + [halfSent]).filter { $0.isClosedByServer() }.count
        #expect(closed == silent.count + 1, "\(closed) of \(silent.count + 1) strangers closed")
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(try member.request(.get, key: "missing").status == .keyNotFound)
        #expect(Int(try member.stats()["handshake_timeouts"] ?? "") ?? 0 >= silent.count + 1)
    }

    /// Proves the router caps its client connections (`--max-connections 4` here, without `--require-auth`): with
    /// four open, a fifth is closed as soon as it is accepted and counted in STAT `rejected_conns`, the four are still
    /// served, and once one leaves a new connection is served again. The router used to accept any number.
    @Test func connectionsOverTheCapAreClosed() throws {
        let server = try ServerProcess.started(name: "router-cap")
        defer { server.stopAndRemove() }
        try server.initialize()
        let router = try RouterProcess(server: server, extraArguments: ["--max-connections", "4"])
        var open = try (0..<4).map { _ in try TestKVClient(port: router.port, timeoutSeconds: 5) }
        for c in open { #expect(try c.request(.noop).status == .success) }
        let extra = try TestKVClient(port: router.port, timeoutSeconds: 5)
        #expect(extra.isClosedByServer(), "a fifth connection was kept open over a cap of 4")
        for c in open { #expect(try c.request(.noop).status == .success) }
        #expect(Int(try open[0].stats()["rejected_conns"] ?? "") ?? 0 >= 1)

        open.removeLast()
        var served = false
        for _ in 0..<20 where !served {
            usleep(100_000)  // the router counts the closed connection out on its own loop
            let c = try TestKVClient(port: router.port, timeoutSeconds: 5)
            served = (try? c.request(.noop).status) == .success
        }
        #expect(served, "no connection served after one of the four left")
    }
}
