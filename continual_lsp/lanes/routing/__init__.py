"""Routing: where one correction goes. Is it a correction at all (`detector`), which
earlier corrections it repeats (`clusters`, over the `embed` sentence embedder), and its
lane — CODE, WEIGHTS or CONTEXT — with the reason (`allocator`, helped by the `learned`
router heads). The guard compiler, the cues and the shared vocabulary (`features`,
`llm`) sit beside this package in `lanes/`, because the guard compiler reads them too."""
