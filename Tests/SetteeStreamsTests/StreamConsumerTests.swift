import SetteeCore
import SetteeStreams
import Testing

func key(_ s: String) -> [UInt8] { Array(s.utf8) }
func mutation(_ seqno: UInt64, _ k: String = "k", _ v: String = "v") -> StreamItem {
    StreamItem(kind: .mutation, seqno: SeqNo(seqno), key: key(k), value: Array(v.utf8))
}
func marker(_ start: UInt64, _ end: UInt64, _ source: SnapshotSource = .memory) -> SnapshotMarker {
    SnapshotMarker(start: SeqNo(start), end: SeqNo(end), source: source)
}
let logC = FailoverLog(entries: [FailoverEntry(uuid: VBucketUUID(0xC), seqno: .zero)])

/// A consumer that has been accepted by a producer with `logC`.
func acceptedConsumer(from resume: ResumePoint = .empty) -> StreamConsumer {
    var c = StreamConsumer(vbucket: VBucketID(3), resume: resume, failoverLog: nil)
    _ = c.start()
    _ = c.accepted(producerLog: logC)
    return c
}

@Suite struct StreamConsumerTests {
    /// Proves the happy path: request, accept (log persisted), items staged, and the snapshot committed with its
    /// resume point only when the item at the snapshot's end arrives.
    @Test func commitsOnlyAtSnapshotEnd() {
        var c = StreamConsumer(vbucket: VBucketID(3), resume: .empty, failoverLog: nil)
        #expect(c.start() == [.sendRequest(StreamRequest(vbucket: VBucketID(3), resume: .empty))])
        #expect(c.accepted(producerLog: logC) == [.persistFailoverLog(logC)])
        #expect(c.snapshotMarker(marker(1, 3)) == [])
        #expect(c.item(mutation(1)) == [.stage(mutation(1))])
        #expect(c.item(mutation(2, "b")) == [.stage(mutation(2, "b"))])
        let resume = ResumePoint(start: SeqNo(3), snapStart: SeqNo(3), snapEnd: SeqNo(3), uuid: VBucketUUID(0xC))
        #expect(c.item(mutation(3)) == [.stage(mutation(3)), .commitSnapshot(marker(1, 3), resume: resume)])
        #expect(c.resume == resume)
        #expect(c.request.resume == resume)
    }

    /// Proves a producer cannot make the consumer stage more than `Limits.dcpConsumerMaxSnapshotItems` items or
    /// `…Bytes` bytes of one snapshot: the item past either discards what was staged and closes the stream; a
    /// snapshot just under both commits, and the counts start again with the next marker. Before, a marker with a
    /// huge range followed by endless items made a replica hold them all.
    @Test func aSnapshotPastItsBoundClosesTheStream() {
        let huge = marker(1, UInt64(Int32.max))
        var byCount = acceptedConsumer()
        _ = byCount.snapshotMarker(huge)
        var seqno: UInt64 = 0
        for _ in 0..<Limits.dcpConsumerMaxSnapshotItems {
            seqno += 1
            guard byCount.item(mutation(seqno)) == [.stage(mutation(seqno))] else {
                Issue.record("item \(seqno) refused under the bound")
                return
            }
        }
        #expect(byCount.openItems == Limits.dcpConsumerMaxSnapshotItems)
        let past = byCount.item(mutation(seqno + 1))
        #expect(past.first == .discardStaged)
        guard case .close(.snapshotTooLarge(huge, let items, _))? = past.last else {
            Issue.record("expected a close for size, got \(past)")
            return
        }
        #expect(items == Limits.dcpConsumerMaxSnapshotItems + 1)

        let big = String(repeating: "x", count: 4 * 1024 * 1024)
        let perItem = 1 + big.utf8.count
        let fit = Limits.dcpConsumerMaxSnapshotBytes / perItem
        var byBytes = acceptedConsumer()
        _ = byBytes.snapshotMarker(marker(1, UInt64(fit)))
        for i in 1..<UInt64(fit) { #expect(byBytes.item(mutation(i, "k", big)) == [.stage(mutation(i, "k", big))]) }
        let last = byBytes.item(mutation(UInt64(fit), "k", big))
        guard case .commitSnapshot? = last.last else {
            Issue.record("a snapshot under the bound did not commit: \(last.count) directives")
            return
        }
        #expect(byBytes.openBytes == 0)
        _ = byBytes.snapshotMarker(marker(UInt64(fit) + 1, UInt64(Int32.max)))
        for i in 1...UInt64(fit) {
            #expect(byBytes.item(mutation(UInt64(fit) + i, "k", big)).count == 1)
        }
        let over = byBytes.item(mutation(2 * UInt64(fit) + 1, "k", big))
        guard case .close(.snapshotTooLarge(_, _, let bytes))? = over.last else {
            Issue.record("expected a close for bytes, got \(over.count) directives")
            return
        }
        #expect(bytes > Limits.dcpConsumerMaxSnapshotBytes)
    }

    /// Proves a snapshot whose last item never comes (a purged tombstone) is completed by the next marker or by
    /// a reached-end stream-end, and discarded by any other stream-end.
    /// Proves SEQNO_ADVANCED (a collection-aware stream whose snapshot ends with another collection's records)
    /// commits the open snapshot when it reaches the marker's end, and only moves the position inside it otherwise; a
    /// snapshot that is the marker and SEQNO_ADVANCED alone commits with nothing staged. One outside the open snapshot,
    /// not above what was seen, or with no snapshot open is a violation that closes the stream.
    @Test func seqnoAdvancedCompletesASnapshot() {
        var c = acceptedConsumer()
        #expect(c.snapshotMarker(marker(1, 9)) == [])
        #expect(c.item(mutation(5)) == [.stage(mutation(5))])
        #expect(c.seqnoAdvanced(SeqNo(7)) == [])
        let at9 = ResumePoint(start: SeqNo(9), snapStart: SeqNo(9), snapEnd: SeqNo(9), uuid: VBucketUUID(0xC))
        #expect(c.seqnoAdvanced(SeqNo(9)) == [.commitSnapshot(marker(1, 9), resume: at9)])
        #expect(c.resume == at9)
        #expect(c.snapshotMarker(marker(10, 12)) == [])
        let at12 = ResumePoint(start: SeqNo(12), snapStart: SeqNo(12), snapEnd: SeqNo(12), uuid: VBucketUUID(0xC))
        #expect(c.seqnoAdvanced(SeqNo(12)) == [.commitSnapshot(marker(10, 12), resume: at12)])

        var noSnapshot = acceptedConsumer()
        #expect(noSnapshot.seqnoAdvanced(SeqNo(3)) == [.close(.itemWithoutSnapshot(SeqNo(3)))])
        var outside = acceptedConsumer()
        _ = outside.snapshotMarker(marker(1, 4))
        #expect(
            outside.seqnoAdvanced(SeqNo(5)) == [.discardStaged, .close(.itemOutsideSnapshot(SeqNo(5), marker(1, 4)))])
        var backwards = acceptedConsumer()
        _ = backwards.snapshotMarker(marker(1, 9))
        _ = backwards.item(mutation(6))
        #expect(
            backwards.seqnoAdvanced(SeqNo(6)) == [
                .discardStaged, .close(.seqnoNotIncreasing(SeqNo(6), lastSeqno: SeqNo(6))),
            ])
    }

    @Test func completionWithoutTheEndItem() {
        var a = acceptedConsumer()
        _ = a.snapshotMarker(marker(1, 5, .disk))
        _ = a.item(mutation(2))
        let r5 = ResumePoint(start: SeqNo(5), snapStart: SeqNo(5), snapEnd: SeqNo(5), uuid: VBucketUUID(0xC))
        #expect(a.snapshotMarker(marker(6, 8)) == [.commitSnapshot(marker(1, 5, .disk), resume: r5)])
        _ = a.item(mutation(7))
        let r8 = ResumePoint(start: SeqNo(8), snapStart: SeqNo(8), snapEnd: SeqNo(8), uuid: VBucketUUID(0xC))
        #expect(a.streamEnd(.reachedEnd) == [.commitSnapshot(marker(6, 8), resume: r8), .finished(.reachedEnd)])

        var b = acceptedConsumer()
        _ = b.snapshotMarker(marker(1, 5))
        _ = b.item(mutation(2))
        #expect(b.streamEnd(.disconnected) == [.discardStaged, .finished(.disconnected)])
        #expect(b.resume == .empty)
        #expect(b.streamEnd(.closed) == [])
    }

    typealias ViolationCase = (
        name: String, markers: [SnapshotMarker], items: [StreamItem], badMarker: SnapshotMarker?, badItem: StreamItem?
    )
    static let violationCases: [ViolationCase] = [
        ("item without a snapshot", [marker(1, 2)], [mutation(1), mutation(2)], nil, mutation(3)),
        ("item below the snapshot", [marker(5, 9)], [], nil, mutation(4)),
        ("item above the snapshot", [marker(5, 9)], [mutation(5)], nil, mutation(10)),
        ("seqno repeats", [marker(5, 9)], [mutation(6)], nil, mutation(6)),
        ("seqno goes back", [marker(5, 9)], [mutation(7)], nil, mutation(6)),
        ("marker not after the open snapshot", [marker(5, 9)], [mutation(6)], marker(8, 12), nil),
        ("marker inverted", [], [], marker(9, 5), nil),
    ]

    /// Proves every contract breach closes the stream, discards staged items, and later messages are ignored.
    @Test func violationsClose() {
        for (name, markers, items, badMarker, badItem) in Self.violationCases {
            violationCloses(name: name, markers: markers, items: items, badMarker: badMarker, badItem: badItem)
        }
    }

    func violationCloses(
        name: String, markers: [SnapshotMarker], items: [StreamItem], badMarker: SnapshotMarker?, badItem: StreamItem?
    ) {
        var c = acceptedConsumer()
        for m in markers { _ = c.snapshotMarker(m) }
        for i in items { _ = c.item(i) }
        let hadOpen: Bool
        if case .streaming(let open, _) = c.state { hadOpen = open != nil } else { hadOpen = false }
        let out = badMarker.map { c.snapshotMarker($0) } ?? c.item(badItem!)
        #expect(out.count == (hadOpen ? 2 : 1), "\(name): \(out)")
        if hadOpen { #expect(out.first == .discardStaged, "\(name)") }
        guard case .close = out.last, case .failed = c.state else {
            Issue.record("\(name): not closed: \(out) \(c.state)")
            return
        }
        #expect(c.item(mutation(100)) == [], "\(name)")
        #expect(c.streamEnd(.closed) == [], "\(name)")
    }

    /// Proves messages before the producer accepted are violations, not silently applied.
    @Test func itemBeforeAcceptIsAViolation() {
        var c = StreamConsumer(vbucket: VBucketID(3), resume: .empty, failoverLog: nil)
        _ = c.start()
        let out = c.item(mutation(1))
        #expect(out.count == 1)
        guard case .close(.unexpected) = out[0] else {
            Issue.record("\(out)")
            return
        }
    }

    /// Proves the rollback round trip: the consumer rolls back, prunes its log, and re-requests from the rollback
    /// point under the history that covers it; a rollback to 0 re-requests as "nothing held".
    @Test func rollbackRoundTrip() {
        let log = FailoverLog(entries: [
            FailoverEntry(uuid: VBucketUUID(0xB), seqno: SeqNo(100)),
            FailoverEntry(uuid: VBucketUUID(0xA), seqno: .zero),
        ])
        let resume = ResumePoint(start: SeqNo(150), snapStart: SeqNo(150), snapEnd: SeqNo(150), uuid: VBucketUUID(0xB))
        var c = StreamConsumer(vbucket: VBucketID(3), resume: resume, failoverLog: log)
        _ = c.start()
        #expect(c.rollbackRequested(to: SeqNo(80)) == [.rollBack(to: SeqNo(80))])
        let pruned = FailoverLog(entries: [FailoverEntry(uuid: VBucketUUID(0xA), seqno: .zero)])
        let again = ResumePoint(start: SeqNo(80), snapStart: SeqNo(80), snapEnd: SeqNo(80), uuid: VBucketUUID(0xA))
        #expect(
            c.rolledBack(to: SeqNo(80)) == [
                .persistFailoverLog(pruned), .persistResumePoint(again),
                .sendRequest(StreamRequest(vbucket: VBucketID(3), resume: again)),
            ])
        #expect(c.rollbackRequested(to: .zero) == [.rollBack(to: .zero)])
        #expect(
            c.rolledBack(to: .zero) == [
                .persistResumePoint(.empty), .sendRequest(StreamRequest(vbucket: VBucketID(3), resume: .empty)),
            ])
    }

    /// Proves a rollback that would remove nothing (to or above our start) is refused, so rollbacks cannot loop.
    @Test func uselessRollbackIsAViolation() {
        let resume = ResumePoint(start: SeqNo(50), snapStart: SeqNo(50), snapEnd: SeqNo(50), uuid: VBucketUUID(0xC))
        var c = StreamConsumer(vbucket: VBucketID(3), resume: resume, failoverLog: logC)
        _ = c.start()
        guard case .close = c.rollbackRequested(to: SeqNo(50)).last else {
            Issue.record("accepted a rollback to its own start")
            return
        }
    }

    /// Proves a rollback asked of a consumer already at the empty resume point (uuid 0, start 0: what every producer
    /// accepts) is a violation that closes the stream, where it rolled back to 0 and asked again without end (a
    /// hostile producer answering every request with a rollback made the client's change stream queue a restart per
    /// answer). A rollback at 0 under a history the producer does not know is still followed once.
    @Test func aRollbackFromTheEmptyResumePointIsAViolation() {
        let known = ResumePoint(start: .zero, snapStart: .zero, snapEnd: .zero, uuid: VBucketUUID(0xC))
        var c = StreamConsumer(vbucket: VBucketID(3), resume: known, failoverLog: logC)
        _ = c.start()
        #expect(c.rollbackRequested(to: .zero) == [.rollBack(to: .zero)])
        #expect(
            c.rolledBack(to: .zero) == [
                .persistResumePoint(.empty), .sendRequest(StreamRequest(vbucket: VBucketID(3), resume: .empty)),
            ])
        guard case .close = c.rollbackRequested(to: .zero).last else {
            Issue.record("followed a rollback from the empty resume point")
            return
        }
    }
}
