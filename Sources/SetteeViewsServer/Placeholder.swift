enum _Placeholder2 {}
