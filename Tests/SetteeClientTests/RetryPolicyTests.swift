import SetteeClient
import SetteeProtocol
import Testing

/// The retry decisions: what is retried, when, and which error surfaces.
@Suite struct RetryPolicyTests {
    let policy = RetryPolicy(initialBackoffMs: 1, maxBackoffMs: 100)

    /// Proves NOT_MY_VBUCKET with a newer map retries at once without a refresh the first time and with backoff
    /// after that (a node answering every retry with a newer map made the operation parse maps in a tight loop until
    /// its deadline), and without one refreshes the map and backs off — for reads and mutations alike (the node did
    /// nothing).
    @Test(arguments: [OperationKind.read, .mutation])
    func notMyVBucket(kind: OperationKind) {
        #expect(
            policy.decide(
                operation: "op", kind: kind, failure: .notMyVBucket(adoptedNewerConfig: true), attempt: 0,
                elapsedMs: 0, timeoutMs: 2500) == .retry(delayMs: 0, refreshConfig: false))
        #expect(
            policy.decide(
                operation: "op", kind: kind, failure: .notMyVBucket(adoptedNewerConfig: true), attempt: 1,
                elapsedMs: 0, timeoutMs: 2500) == .retry(delayMs: 1, refreshConfig: false))
        #expect(
            policy.decide(
                operation: "op", kind: kind, failure: .notMyVBucket(adoptedNewerConfig: true), attempt: 6,
                elapsedMs: 0, timeoutMs: 2500) == .retry(delayMs: 32, refreshConfig: false))
        #expect(
            policy.decide(
                operation: "op", kind: kind, failure: .notMyVBucket(adoptedNewerConfig: false), attempt: 3,
                elapsedMs: 0, timeoutMs: 2500) == .retry(delayMs: 8, refreshConfig: true))
    }

    /// Proves TMPFAIL and not-sent failures retry with doubling, capped backoff for mutations too.
    @Test func temporaryAndNotSentRetry() {
        #expect(policy.backoffMs(attempt: 0) == 1)
        #expect(policy.backoffMs(attempt: 5) == 32)
        #expect(policy.backoffMs(attempt: 40) == 100)
        #expect(
            policy.decide(
                operation: "upsert", kind: .mutation, failure: .temporaryFailure, attempt: 2, elapsedMs: 10,
                timeoutMs: 2500) == .retry(delayMs: 4, refreshConfig: false))
        #expect(
            policy.decide(
                operation: "upsert", kind: .mutation, failure: .notSent, attempt: 0, elapsedMs: 10, timeoutMs: 2500)
                == .retry(delayMs: 1, refreshConfig: true))
    }

    /// Proves a mutation whose outcome is unknown (connection lost or deadline after send) is never
    /// retried and surfaces `ambiguous`, while a read retries after a lost connection and times out
    /// plainly after its deadline.
    @Test func unknownOutcomes() {
        let lost = policy.decide(
            operation: "upsert", kind: .mutation, failure: .connectionLostAfterSend, attempt: 0, elapsedMs: 5,
            timeoutMs: 2500)
        guard case .fail(.ambiguous(let op, _)) = lost else {
            Issue.record("expected ambiguous, got \(lost)")
            return
        }
        #expect(op == "upsert")
        let timedOut = policy.decide(
            operation: "remove", kind: .mutation, failure: .timedOutAfterSend, attempt: 0, elapsedMs: 2500,
            timeoutMs: 2500)
        guard case .fail(.ambiguous) = timedOut else {
            Issue.record("expected ambiguous, got \(timedOut)")
            return
        }
        #expect(
            policy.decide(
                operation: "get", kind: .read, failure: .connectionLostAfterSend, attempt: 0, elapsedMs: 5,
                timeoutMs: 2500) == .retry(delayMs: 1, refreshConfig: true))
        #expect(
            policy.decide(
                operation: "get", kind: .read, failure: .timedOutAfterSend, attempt: 0, elapsedMs: 2500, timeoutMs: 2500
            )
                == .fail(.timeout(operation: "get", afterMs: 2500)))
    }

    /// Proves SYNC_WRITE_IN_PROGRESS is retried with backoff like TMPFAIL (the server did nothing; another durable
    /// write to the key is pending) and, at the deadline, fails as itself.
    @Test func syncWriteInProgressIsRetried() {
        let p = RetryPolicy(initialBackoffMs: 10, maxBackoffMs: 100)
        #expect(
            p.decide(
                operation: "upsert", kind: .mutation, failure: .syncWriteInProgress, attempt: 1, elapsedMs: 10,
                timeoutMs: 2500) == .retry(delayMs: 20, refreshConfig: false))
        #expect(
            p.decide(
                operation: "upsert", kind: .mutation, failure: .syncWriteInProgress, attempt: 9, elapsedMs: 2490,
                timeoutMs: 2500) == .fail(.syncWriteInProgress))
    }

    /// Proves no retry is scheduled past the deadline: the op fails timeout, or temporaryFailure when the
    /// server kept answering TMPFAIL.
    @Test func deadlineBoundsRetries() {
        #expect(
            policy.decide(
                operation: "get", kind: .read, failure: .notSent, attempt: 10, elapsedMs: 2450, timeoutMs: 2500)
                == .fail(.timeout(operation: "get", afterMs: 2500)))
        #expect(
            policy.decide(
                operation: "upsert", kind: .mutation, failure: .temporaryFailure, attempt: 10, elapsedMs: 2450,
                timeoutMs: 2500) == .fail(.temporaryFailure))
    }

    /// Proves opcodes are classified safely: gets are reads, every store/delete/counter (and quiet forms,
    /// and unknown opcodes) are mutations.
    @Test func opcodeKinds() {
        for op in [Opcode.get, .getq, .getk, .getkq, .getMeta, .noop] { #expect(OperationKind(op) == .read, "\(op)") }
        for op in [Opcode.set, .setq, .add, .replace, .delete, .increment, .decrement, .append, .prepend, .touch, .gat]
        {
            #expect(OperationKind(op) == .mutation, "\(op)")
        }
        #expect(OperationKind(Opcode(0xee)) == .mutation)
    }

    /// Proves response statuses map to the typed errors the brief names (ADD's EEXISTS is keyExists,
    /// any other op's is a CAS mismatch; an unknown collection or scope is collectionNotFound).
    @Test func statusMapping() {
        #expect(ClientError.from(status: .success, opcode: .get, message: "") == nil)
        #expect(ClientError.from(status: .keyNotFound, opcode: .get, message: "") == .keyNotFound)
        #expect(ClientError.from(status: .keyExists, opcode: .add, message: "") == .keyExists)
        #expect(ClientError.from(status: .keyExists, opcode: .replace, message: "") == .casMismatch)
        #expect(ClientError.from(status: .durabilityImpossible, opcode: .set, message: "") == .durabilityImpossible)
        #expect(ClientError.from(status: .syncWriteAmbiguous, opcode: .set, message: "") == .durabilityAmbiguous)
        // UNKNOWN_COLLECTION / UNKNOWN_SCOPE (a collection handle resolves its id again on it, ADR 0134).
        let unknown = #"{"manifest_uid":"3"}"#
        #expect(
            ClientError.from(status: .unknownCollection, opcode: .get, message: unknown) == .collectionNotFound(unknown)
        )
        #expect(ClientError.from(status: .unknownScope, opcode: .set, message: "") == .collectionNotFound(""))
        #expect(
            ClientError.from(status: Status(0x99), opcode: .set, message: "x") == .server(status: 0x99, message: "x"))
    }
}
