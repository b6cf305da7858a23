import SetteeCore
import Testing

@Suite struct PartitioningIndexTests {
    /// Proves the binary search finds the first element of the second partition on every split of sorted arrays of
    /// 0 to 40 elements (duplicates included), against a linear scan, and works on a slice's own indices.
    @Test func findsTheFirstElementOfTheSecondPartition() {
        for n in 0...40 {
            let values = (0..<n).map { $0 / 3 }
            for key in -1...(n / 3 + 1) {
                let linear = values.firstIndex { $0 >= key } ?? values.endIndex
                #expect(values.partitioningIndex { $0 >= key } == linear, "n \(n) key \(key)")
                let slice = values.dropFirst(n / 2)
                let sliceLinear = slice.firstIndex { $0 > key } ?? slice.endIndex
                #expect(slice.partitioningIndex { $0 > key } == sliceLinear, "slice n \(n) key \(key)")
            }
        }
    }
}
