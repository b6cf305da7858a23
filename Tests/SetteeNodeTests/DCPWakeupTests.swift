import Testing

@testable import SetteeNode

/// A DCP producer connection's change observer wakes its event loop only for the vBuckets it streams (ADR 0084).
@Suite struct DCPWakeupTests {
    /// A change of a vBucket the connection does not stream (one this node is a replica of, or one another
    /// connection streams) is neither recorded nor a reason to wake; one it streams is, once, until taken; a closed
    /// stream's vBucket wakes nothing again.
    @Test func onlyStreamedVBucketsWakeTheLoop() {
        let w = DCPWakeup()
        #expect(!w.changed(3))
        #expect(w.take().isEmpty)
        w.stream(3)
        w.stream(7)
        #expect(w.changed(3))
        #expect(!w.changed(4))
        #expect(w.changed(3))
        #expect(w.changed(7))
        #expect(w.take() == [3, 7])
        #expect(w.take().isEmpty)
        w.unstream(3)
        #expect(!w.changed(3))
        #expect(w.changed(7))
        w.unstreamAll()
        #expect(!w.changed(7))
        #expect(w.take() == [7])  // recorded before the streams closed; the loop's wake skips it
    }
}
