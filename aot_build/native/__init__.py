"""Reading native binaries: ELF dependencies and symbol versions (:mod:`.elf`) and the
manylinux policy they meet (:mod:`.platform_tag`). Standard library only."""
