import NIOCore
import SetteeProtocol
import Testing

/// The consumer handshake both DCP consumers (a replica's connection, the client's change stream) run, without
/// sockets: the requests it names, in order, and what each answer does.
@Suite struct DCPConsumerHandshakeTests {
    static func machine(authenticates: Bool, flags: UInt32 = DCPOpenFlags.producer) -> DCPConsumerHandshake {
        DCPConsumerHandshake(
            bucket: "demo", connectionName: "replication:n1", authenticates: authenticates, openFlags: flags,
            bufferBytes: 1_048_576)
    }

    /// Proves the order with credentials: login first, then SELECT_BUCKET(bucket), DCP_OPEN(producer flags,
    /// connection name), CONTROL connection_buffer_size, then ready; each request carries its step's opaque.
    @Test func loginSelectOpenControlReady() throws {
        var h = Self.machine(authenticates: true, flags: DCPOpenFlags.producer | DCPOpenFlags.includeXattrs)
        #expect(h.connected() == .startLogin)
        #expect(h.isLoggingIn)
        // SASL answers belong to the login, not to the handshake.
        #expect(h.answer(opaque: 1, status: .authContinue) == .ignore)
        #expect(h.state == .waiting(.login))

        guard case .send(let select) = h.loggedIn() else { throw HandshakeTestError("no SELECT_BUCKET") }
        #expect(select.opcode == .selectBucket && select.opaque == 2 && select.key == Array("demo".utf8))

        guard case .send(let open) = h.answer(opaque: 2, status: .success) else { throw HandshakeTestError("no open") }
        #expect(open.opcode == .dcpOpen && open.opaque == 3 && open.key == Array("replication:n1".utf8))
        #expect(open.extras == [0, 0, 0, 0, 0, 0, 0, 0x05])

        guard case .send(let control) = h.answer(opaque: 3, status: .success) else {
            throw HandshakeTestError("no CONTROL")
        }
        #expect(control.opcode == .dcpControl && control.opaque == 4)
        #expect(control.key == Array("connection_buffer_size".utf8) && control.value == Array("1048576".utf8))

        #expect(h.answer(opaque: 4, status: .success) == .ready)
        #expect(h.isReady)
        // Final: later answers change nothing.
        #expect(h.answer(opaque: 4, status: .success) == .ignore)
        #expect(h.loggedIn() == .ignore && h.connected() == .ignore)
        #expect(h.state == .ready)
    }

    /// Proves a replica's handshake (ADR 0073) asks CONTROL settee_prepare_levels after the buffer size, and trusts
    /// DCP_PREPARE's level only when the producer answers "true": an older Settee producer answers an empty SUCCESS
    /// (it wrote level 1 for every prepare), and a producer that refuses the question is still usable, without
    /// levels. Before, the consumer never asked and could not tell real levels from the constant 1.
    @Test(arguments: [
        (Status.success, Array("true".utf8), true), (.success, [], false), (.unknownCommand, [], false),
    ])
    func aReplicaAsksWhetherPrepareLevelsAreReal(status: Status, value: [UInt8], trusted: Bool) throws {
        var h = DCPConsumerHandshake(
            bucket: "demo", connectionName: "replication:n1", authenticates: false, bufferBytes: 4096,
            asksPrepareLevels: true)
        _ = h.connected()
        _ = h.answer(opaque: 2, status: .success)
        _ = h.answer(opaque: 3, status: .success)
        guard case .send(let ask) = h.answer(opaque: 4, status: .success) else {
            throw HandshakeTestError("no CONTROL settee_prepare_levels")
        }
        #expect(ask.opcode == .dcpControl && ask.opaque == 5)
        #expect(ask.key == Array("settee_prepare_levels".utf8) && ask.value == Array("true".utf8))
        #expect(!h.producerSendsLevels)
        #expect(h.answer(opaque: 5, status: status, value: value) == .ready)
        #expect(h.isReady && h.producerSendsLevels == trusted)
        // A consumer that does not ask is ready after the buffer size, trusting no levels.
        var plain = Self.machine(authenticates: false)
        _ = plain.connected()
        _ = plain.answer(opaque: 2, status: .success)
        _ = plain.answer(opaque: 3, status: .success)
        #expect(plain.answer(opaque: 4, status: .success) == .ready && !plain.producerSendsLevels)
    }

    /// Proves a replica's handshake asks CONTROL settee_purge_seqno_markers last (ADR 0095), after the prepare-level
    /// question, and learns whether the producer will send purge seqnos only from a "true"; a refusal leaves the
    /// connection usable without them.
    @Test(arguments: [
        (Status.success, Array("true".utf8), true), (.success, [], false), (.invalidArguments, [], false),
    ])
    func aReplicaAsksForPurgeSeqnoMarkers(status: Status, value: [UInt8], sent: Bool) throws {
        var h = DCPConsumerHandshake(
            bucket: "demo", connectionName: "replication:n1", authenticates: false, bufferBytes: 4096,
            asksPrepareLevels: true, asksPurgeSeqnos: true)
        _ = h.connected()
        _ = h.answer(opaque: 2, status: .success)
        _ = h.answer(opaque: 3, status: .success)
        _ = h.answer(opaque: 4, status: .success)
        guard case .send(let ask) = h.answer(opaque: 5, status: .success, value: Array("true".utf8)) else {
            throw HandshakeTestError("no CONTROL settee_purge_seqno_markers")
        }
        #expect(ask.opcode == .dcpControl && ask.opaque == 6)
        #expect(ask.key == Array("settee_purge_seqno_markers".utf8) && ask.value == Array("true".utf8))
        #expect(h.producerSendsLevels && !h.producerSendsPurgeSeqnos)
        #expect(h.answer(opaque: 6, status: status, value: value) == .ready)
        #expect(h.isReady && h.producerSendsPurgeSeqnos == sent)
    }

    /// Proves an open bucket skips the login: the first request is SELECT_BUCKET, and `loggedIn` does nothing.
    @Test func withoutCredentialsSelectsTheBucketFirst() {
        var h = Self.machine(authenticates: false)
        #expect(
            h.connected() == .send(DCPRequest(opcode: .selectBucket, opaque: 2, key: Array("demo".utf8))))
        #expect(!h.isLoggingIn)
        #expect(h.loggedIn() == .ignore)
        guard case .send(let open) = h.answer(opaque: 2, status: .success) else {
            Issue.record("no DCP_OPEN")
            return
        }
        #expect(open.extras == [0, 0, 0, 0, 0, 0, 0, 0x01])
    }

    /// Proves each refusal fails the handshake naming the step and status, an answer to a request not outstanding
    /// fails it as a broken producer, and a failed handshake stays failed.
    @Test(arguments: [
        (DCPConsumerHandshake.Step.selectBucket, Status.accessDenied),
        (.selectBucket, .keyNotFound), (.open, .accessDenied), (.control, .invalidArguments),
    ])
    func refusalsFailAtTheirStep(step: DCPConsumerHandshake.Step, status: Status) {
        var h = Self.machine(authenticates: false)
        _ = h.connected()
        for earlier in 2..<step.rawValue { _ = h.answer(opaque: earlier, status: .success) }
        let refusal = DCPConsumerHandshake.Refusal(step: step, status: status)
        #expect(h.answer(opaque: step.rawValue, status: status) == .failed(refusal))
        #expect(h.state == .failed(refusal))
        #expect(h.answer(opaque: step.rawValue, status: .success) == .ignore)
    }

    @Test func anAnswerToSomethingNotAskedFails() {
        var h = Self.machine(authenticates: false)
        _ = h.connected()
        #expect(h.answer(opaque: 3, status: .success) == .failed(.init(step: .selectBucket, status: .invalidArguments)))
        var early = Self.machine(authenticates: false)
        #expect(early.answer(opaque: 2, status: .success) == .ignore)  // not connected yet
        #expect(early.state == .connecting)
    }

    /// Proves a STREAM_REQ answer is read as accept (with the failover log, newest first), rollback (8-byte
    /// seqno), not-my-vBucket (with its config) or refusal, and that a malformed accept or rollback body is a
    /// refusal, never a trap.
    @Test func streamAnswers() {
        var log = ByteBuffer()
        log.writeDCPFailoverLog([(uuid: 9, seqno: 40), (uuid: 7, seqno: 0)])
        #expect(
            DCPStreamAnswer(status: .success, value: log)
                == .accepted(failoverLog: [.init(uuid: 9, seqno: 40), .init(uuid: 7, seqno: 0)]))
        #expect(DCPStreamAnswer(status: .success, value: ByteBuffer()) == .refused(.invalidArguments))
        #expect(DCPStreamAnswer(status: .success, value: ByteBuffer(bytes: [1, 2, 3])) == .refused(.invalidArguments))

        var to = ByteBuffer()
        to.writeInteger(UInt64(12))
        #expect(DCPStreamAnswer(status: .rollback, value: to) == .rollback(to: 12))
        #expect(DCPStreamAnswer(status: .rollback, value: ByteBuffer(bytes: [0, 1])) == .refused(.invalidArguments))

        let config = ByteBuffer(string: #"{"rev":3}"#)
        #expect(DCPStreamAnswer(status: .notMyVBucket, value: config) == .notMyVBucket(config: config))
        #expect(DCPStreamAnswer(status: .rangeError, value: ByteBuffer()) == .refused(.rangeError))
    }

    /// Proves a stream request and a stream close encode as the frames a producer decodes: opcode, vBucket,
    /// opaque and the 48-byte STREAM_REQ extras.
    @Test func streamRequestEncodes() throws {
        var b = ByteBuffer()
        let x = DCPExtras.StreamRequest(start: 5, end: UInt64.max, uuid: 77, snapStart: 5, snapEnd: 5)
        b.writeRequest(DCPRequest.streamRequest(vbucket: 12, opaque: 0x1000_000c, x))
        b.writeRequest(DCPRequest.closeStream(vbucket: 12, opaque: 0x0f00_0000))
        let request = try #require(try FrameDecoder.decode(&b, maxBodyLength: 1 << 20))
        #expect(request.opcode == .dcpStreamRequest && request.vbucket == 12 && request.opaque == 0x1000_000c)
        #expect(DCPExtras.StreamRequest(request.extras) == x)
        let close = try #require(try FrameDecoder.decode(&b, maxBodyLength: 1 << 20))
        #expect(close.opcode == .dcpCloseStream && close.vbucket == 12 && close.extras.readableBytes == 0)
    }
}

struct HandshakeTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A change stream filtered by collection (ADR 0142) says HELLO Collections before anything else.
@Suite struct DCPConsumerHandshakeHelloTests {
    static func machine(authenticates: Bool) -> DCPConsumerHandshake {
        DCPConsumerHandshake(
            bucket: "demo", connectionName: "settee-changes:1", authenticates: authenticates, bufferBytes: 4096,
            helloFeatures: [.collections])
    }

    /// Proves the order: HELLO (opaque 7, the feature as a big-endian u16) first; an answer listing Collections
    /// goes on to the login (with credentials) or SELECT_BUCKET (without), and the rest of the handshake is unchanged.
    @Test(arguments: [true, false])
    func helloComesFirstThenTheUsualSteps(authenticates: Bool) throws {
        var h = Self.machine(authenticates: authenticates)
        guard case .send(let hello) = h.connected() else { throw HandshakeTestError("no HELLO") }
        #expect(hello.opcode == .hello && hello.opaque == 7 && hello.value == [0x00, 0x12])
        #expect(h.state == .waiting(.hello))
        let next = h.answer(opaque: 7, status: .success, value: [0x00, 0x06, 0x00, 0x12])
        if authenticates {
            #expect(next == .startLogin && h.isLoggingIn)
            guard case .send(let select) = h.loggedIn() else { throw HandshakeTestError("no SELECT_BUCKET") }
            #expect(select.opcode == .selectBucket)
        } else {
            guard case .send(let select) = next else { throw HandshakeTestError("no SELECT_BUCKET") }
            #expect(select.opcode == .selectBucket && select.opaque == 2)
        }
        guard case .send(let open) = h.answer(opaque: 2, status: .success) else { throw HandshakeTestError("no open") }
        #expect(open.opcode == .dcpOpen)
    }

    /// Proves a producer that does not agree to Collections (its answer omits the feature, or HELLO is refused) fails
    /// the handshake at the HELLO step: it would send engine or default-collection keys the stream would misread.
    @Test(arguments: [(Status.success, [UInt8]([0x00, 0x06])), (.success, []), (.unknownCommand, [])])
    func aProducerWithoutCollectionsFailsTheHandshake(status: Status, value: [UInt8]) {
        var h = Self.machine(authenticates: false)
        _ = h.connected()
        let expected: Status = status == .success ? .notSupported : status
        #expect(h.answer(opaque: 7, status: status, value: value) == .failed(.init(step: .hello, status: expected)))
        #expect(h.answer(opaque: 2, status: .success) == .ignore)
    }

    /// Proves a handshake without features sends no HELLO (replicas and default-collection streams are unchanged).
    @Test func noFeaturesNoHello() {
        var h = DCPConsumerHandshake(bucket: "demo", connectionName: "r", authenticates: false, bufferBytes: 4096)
        guard case .send(let first) = h.connected() else {
            Issue.record("no first request")
            return
        }
        #expect(first.opcode == .selectBucket)
    }
}
