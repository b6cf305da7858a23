import NIOCore

/// The consumer's side of opening a DCP connection and its streams, shared by a replica's `ConsumerConnection`
/// (SetteeNode) and the smart client's `ChangeStreamConnection` (SetteeClient): which request goes next and what
/// each answer means. Pure: the shells write the requests it names and feed it the answers; the SASL exchange
/// itself is `SaslClientLogin`'s, and each stream's protocol after its request is `StreamConsumer`'s.
///
/// States:
///
///     connecting ─connected─▶ waiting(login) ─loggedIn─▶ waiting(selectBucket) ─ok─▶ waiting(open) ─ok─▶
///                │                                        ▲                                              │
///                └──────────── (no credentials) ──────────┘                         waiting(control) ◀──┘
///                                                                                      │ok
///                                            (asksPrepareLevels) waiting(prepareLevels) ┤
///                                            (asksPurgeSeqnos)   waiting(purgeSeqnos)   ┤ (each answered, refused
///                                                                                       │  or not: the next one)
///     any refusal, or an answer to a request not outstanding ──▶ failed(Refusal)        ▼
///                                                                                     ready
///
/// Invariants: (1) one handshake request is outstanding at a time and its opaque is its step's raw value
/// (1...6), all below `streamOpaqueBase`, where stream requests' opaques start; (2) `ready` and `failed` are
/// final: answers after them are `.ignore`d; (3) the login step's answers belong to the SASL exchange, so
/// `answer` ignores them while `isLoggingIn`.
public struct DCPConsumerHandshake: Sendable, Equatable {
    public enum Step: UInt32, Sendable, Equatable {
        case login = 1
        case selectBucket = 2
        case open = 3
        case control = 4
        /// CONTROL `settee_prepare_levels` (replicas only, ADR 0073).
        case prepareLevels = 5
        /// CONTROL `settee_purge_seqno_markers` (replicas only, ADR 0095).
        case purgeSeqnos = 6
        /// HELLO, first, when `helloFeatures` is not empty (a collection-aware stream, ADR 0142).
        case hello = 7
    }

    /// Why the handshake stopped: the step refused and the status it answered with.
    public struct Refusal: Error, Sendable, Equatable {
        public var step: Step
        public var status: Status
        public init(step: Step, status: Status) {
            self.step = step
            self.status = status
        }
    }

    public enum State: Sendable, Equatable {
        case connecting
        case waiting(Step)
        case ready
        case failed(Refusal)
    }

    public enum Directive: Sendable, Equatable {
        /// Run the SASL login (its requests carry opaque `Step.login.rawValue`), then call `loggedIn()`.
        case startLogin
        /// Write this request and wait for its answer.
        case send(DCPRequest)
        /// The connection may carry stream requests now.
        case ready
        /// Close the connection: a step was refused.
        case failed(Refusal)
        /// Nothing to do.
        case ignore
    }

    /// Stream requests use opaques from here up (each shell picks how); handshake answers are below it.
    public static let streamOpaqueBase: UInt32 = 0x1000_0000

    public let bucket: String
    /// The DCP connection name DCP_OPEN sends (the producer logs it and may key its state by it).
    public let connectionName: String
    /// Whether to log in first (false: the bucket is open to anonymous connections).
    public let authenticates: Bool
    /// DCP_OPEN's flags: `DCPOpenFlags.producer`, with `includeXattrs` for a consumer that keeps whole values.
    public let openFlags: UInt32
    /// The consumer's flow-control window, sent as CONTROL `connection_buffer_size`.
    public let bufferBytes: Int
    /// Whether to ask (CONTROL `DCPControlKey.prepareLevels`) if DCP_PREPARE carries real durability levels: a
    /// replica does, to acknowledge prepares that need no disk from memory.
    public let asksPrepareLevels: Bool
    /// Whether to ask (CONTROL `DCPControlKey.purgeSeqnoMarkers`) for snapshot markers carrying the producer's purge
    /// seqno: a replica does, so a copy filled from 0 knows which deletions it can never have been sent (ADR 0095).
    public let asksPurgeSeqnos: Bool
    /// HELLO features the connection must have before anything else (a stream filtered by collection needs
    /// `HelloFeature.collections`: the producer then sends keys as `LEB128(collection id) ‖ key` and reads a STREAM_REQ
    /// value as a collection filter, ADR 0138). Empty: no HELLO is sent. A producer whose answer lacks one of them
    /// fails the handshake at `.hello` with `.notSupported`.
    public let helloFeatures: [HelloFeature]
    public private(set) var state: State = .connecting
    /// The producer said it sends its purge seqno in snapshot markers (ADR 0095).
    public private(set) var producerSendsPurgeSeqnos = false
    /// The producer said DCP_PREPARE's level byte is the prepare's real level (ADR 0073); false until it did, and
    /// for every producer that did not (older Settee nodes wrote level 1 for every prepare).
    public private(set) var producerSendsLevels = false

    public init(
        bucket: String, connectionName: String, authenticates: Bool, openFlags: UInt32 = DCPOpenFlags.producer,
        bufferBytes: Int, asksPrepareLevels: Bool = false, asksPurgeSeqnos: Bool = false,
        helloFeatures: [HelloFeature] = []
    ) {
        self.helloFeatures = helloFeatures
        self.asksPrepareLevels = asksPrepareLevels
        self.asksPurgeSeqnos = asksPurgeSeqnos
        self.bucket = bucket
        self.connectionName = connectionName
        self.authenticates = authenticates
        self.openFlags = openFlags
        self.bufferBytes = bufferBytes
    }

    public var isLoggingIn: Bool { state == .waiting(.login) }
    public var isReady: Bool { state == .ready }

    /// The TCP (or TLS) connection is up.
    public mutating func connected() -> Directive {
        guard state == .connecting else { return .ignore }
        if !helloFeatures.isEmpty {
            state = .waiting(.hello)
            var value: [UInt8] = []
            for f in helloFeatures { withUnsafeBytes(of: f.rawValue.bigEndian) { value += $0 } }
            return .send(
                DCPRequest(
                    opcode: .hello, opaque: Step.hello.rawValue, key: Array("settee-changes".utf8), value: value))
        }
        return afterHello()
    }

    /// Login (when credentials are given) or SELECT_BUCKET: what follows the connection, or HELLO's answer.
    private mutating func afterHello() -> Directive {
        if authenticates {
            state = .waiting(.login)
            return .startLogin
        }
        return selectBucket()
    }

    /// The SASL login succeeded.
    public mutating func loggedIn() -> Directive {
        guard isLoggingIn else { return .ignore }
        return selectBucket()
    }

    /// An answer (a response frame with an opaque below `streamOpaqueBase`) arrived; `value` is its body.
    public mutating func answer(opaque: UInt32, status: Status, value: [UInt8] = []) -> Directive {
        guard case .waiting(let step) = state, step != .login else { return .ignore }
        if step == .prepareLevels || step == .purgeSeqnos, opaque == step.rawValue, status != .success {
            // An optional question: a producer that refuses it just does not send real levels (purge seqnos).
            return afterOptional(step)
        }
        guard opaque == step.rawValue, status == .success else {
            // A refusal, or an answer to something this handshake did not ask (a broken producer): either way
            // the connection cannot be trusted to go on.
            let refusal = Refusal(step: step, status: opaque == step.rawValue ? status : .invalidArguments)
            state = .failed(refusal)
            return .failed(refusal)
        }
        switch step {
        case .hello:
            // The answer lists the features the producer agreed to, as big-endian u16s.
            var agreed = Set<UInt16>()
            var i = 0
            while i + 1 < value.count {
                agreed.insert(UInt16(value[i]) << 8 | UInt16(value[i + 1]))
                i += 2
            }
            guard helloFeatures.allSatisfy({ agreed.contains($0.rawValue) }) else {
                let refusal = Refusal(step: .hello, status: .notSupported)
                state = .failed(refusal)
                return .failed(refusal)
            }
            return afterHello()
        case .login, .selectBucket:
            state = .waiting(.open)
            var extras: [UInt8] = [0, 0, 0, 0]  // seqno, unused
            withUnsafeBytes(of: openFlags.bigEndian) { extras += $0 }
            return .send(
                DCPRequest(
                    opcode: .dcpOpen, opaque: Step.open.rawValue, extras: extras, key: Array(connectionName.utf8)))
        case .open:
            state = .waiting(.control)
            return .send(
                DCPRequest(
                    opcode: .dcpControl, opaque: Step.control.rawValue,
                    key: Array(DCPControlKey.connectionBufferSize.utf8), value: Array(String(bufferBytes).utf8)))
        case .control where asksPrepareLevels:
            state = .waiting(.prepareLevels)
            return .send(
                DCPRequest(
                    opcode: .dcpControl, opaque: Step.prepareLevels.rawValue,
                    key: Array(DCPControlKey.prepareLevels.utf8), value: Array(DCPControlKey.yes.utf8)))
        case .control:
            return afterOptional(.control)
        case .prepareLevels:
            producerSendsLevels = value == Array(DCPControlKey.yes.utf8)
            return afterOptional(.prepareLevels)
        case .purgeSeqnos:
            producerSendsPurgeSeqnos = value == Array(DCPControlKey.yes.utf8)
            return afterOptional(.purgeSeqnos)
        }
    }

    /// What follows `step` once it is answered: the purge-seqno question if asked and not yet sent, else ready.
    private mutating func afterOptional(_ step: Step) -> Directive {
        if asksPurgeSeqnos && (step == .control || step == .prepareLevels) {
            state = .waiting(.purgeSeqnos)
            return .send(
                DCPRequest(
                    opcode: .dcpControl, opaque: Step.purgeSeqnos.rawValue,
                    key: Array(DCPControlKey.purgeSeqnoMarkers.utf8), value: Array(DCPControlKey.yes.utf8)))
        }
        state = .ready
        return .ready
    }

    private mutating func selectBucket() -> Directive {
        state = .waiting(.selectBucket)
        return .send(DCPRequest(opcode: .selectBucket, opaque: Step.selectBucket.rawValue, key: Array(bucket.utf8)))
    }
}

/// A request a consumer sends: handshake steps, stream requests, stream closes.
public struct DCPRequest: Sendable, Equatable {
    public var opcode: Opcode
    public var vbucket: UInt16
    public var opaque: UInt32
    public var extras: [UInt8]
    public var key: [UInt8]
    public var value: [UInt8]

    public init(
        opcode: Opcode, vbucket: UInt16 = 0, opaque: UInt32, extras: [UInt8] = [], key: [UInt8] = [],
        value: [UInt8] = []
    ) {
        self.opcode = opcode
        self.vbucket = vbucket
        self.opaque = opaque
        self.extras = extras
        self.key = key
        self.value = value
    }

    /// STREAM_REQ for one vBucket from a resume point.
    public static func streamRequest(vbucket: UInt16, opaque: UInt32, _ request: DCPExtras.StreamRequest) -> DCPRequest
    {
        var extras = ByteBuffer()
        request.write(to: &extras)
        return DCPRequest(
            opcode: .dcpStreamRequest, vbucket: vbucket, opaque: opaque, extras: Array(extras.readableBytesView))
    }

    /// CLOSE_STREAM for one vBucket.
    public static func closeStream(vbucket: UInt16, opaque: UInt32) -> DCPRequest {
        DCPRequest(opcode: .dcpCloseStream, vbucket: vbucket, opaque: opaque)
    }
}

extension ByteBuffer {
    /// Writes `request` as one memcached-binary request frame.
    public mutating func writeRequest(_ request: DCPRequest) {
        writeRequest(
            opcode: request.opcode, vbucket: request.vbucket, opaque: request.opaque, extras: request.extras,
            key: request.key, value: request.value)
    }
}

/// What a producer's answer to a STREAM_REQ means; both consumers feed it to their `StreamConsumer`.
public enum DCPStreamAnswer: Sendable, Equatable {
    /// Accepted from the resume point: the producer's failover log, newest first (never empty).
    case accepted(failoverLog: [DCPFailoverEntry])
    /// The consumer's history diverged: roll back to at most this seqno and ask again.
    case rollback(to: UInt64)
    /// The node is not the vBucket's active; the body is its cluster config when it sent one.
    case notMyVBucket(config: ByteBuffer)
    /// Refused, or an accept or rollback whose body is malformed (its status, or `.invalidArguments`).
    case refused(Status)

    public init(status: Status, value: ByteBuffer) {
        switch status {
        case .success:
            guard let entries = readDCPFailoverLog(value), !entries.isEmpty else {
                self = .refused(.invalidArguments)
                return
            }
            self = .accepted(failoverLog: entries.map { DCPFailoverEntry(uuid: $0.uuid, seqno: $0.seqno) })
        case .rollback:
            guard value.readableBytes == 8, let to = value.getInteger(at: value.readerIndex, as: UInt64.self) else {
                self = .refused(.invalidArguments)
                return
            }
            self = .rollback(to: to)
        case .notMyVBucket:
            self = .notMyVBucket(config: value)
        default:
            self = .refused(status)
        }
    }
}

/// One failover-log entry as the wire carries it.
public struct DCPFailoverEntry: Sendable, Equatable {
    public var uuid: UInt64
    public var seqno: UInt64
    public init(uuid: UInt64, seqno: UInt64) {
        self.uuid = uuid
        self.seqno = seqno
    }
}
